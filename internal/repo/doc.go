// Package repo reads and writes strata repositories: a signed index
// (index.json and index.json.minisig), images under images/ and overlays
// under overlays/. A repository's files live in a Store (DirStore for a
// local directory; every store passes the suite in storetest), which opens
// regular files only and never leaves the repository. It also loads and
// verifies the signed image manifests that sit beside squashfs files.
package repo
