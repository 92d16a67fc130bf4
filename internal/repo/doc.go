// Package repo reads and writes strata repositories: a directory with a
// signed index (index.json and index.json.minisig), images under images/
// and overlays under overlays/. It also loads and verifies the signed image
// manifests that sit beside squashfs files.
package repo
