// Package sign wraps minisign (aead.dev/minisign) for strata: key
// generation and loading, detached signatures over manifests and indexes,
// and verification against a set of trusted public keys. Every signature
// strata writes can be checked with `minisign -V`.
package sign
