package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// DigestPrefix starts every digest strata writes.
const DigestPrefix = "sha256:"

// Digest returns the strata digest ("sha256:<hex>") of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// ValidDigest reports whether d has the form "sha256:<64 hex digits>".
func ValidDigest(d string) bool {
	return strings.HasPrefix(d, DigestPrefix) && validHex(strings.TrimPrefix(d, DigestPrefix), 64)
}

// TreeDigest returns the digest of a whole tree: one SHA-256 over every
// entry, in byte order of paths, each encoded as
// path NUL type NUL mode NUL uid NUL gid NUL size NUL sha256 NUL target LF.
// Modification times are not part of a tree's identity. The input is not
// modified.
func TreeDigest(entries []Entry) string {
	sorted := make([]Entry, len(entries))
	copy(sorted, entries)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	h := sha256.New()
	for _, e := range sorted {
		fmt.Fprintf(h, "%s\x00%s\x00%04o\x00%d\x00%d\x00%d\x00%s\x00%s\n",
			e.Path, e.Type, uint32(e.Mode), e.UID, e.GID, e.Size, e.SHA256, e.Target)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}
