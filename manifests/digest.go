package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
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
	sorted := entries
	if !slices.IsSortedFunc(entries, byPath) {
		sorted = slices.Clone(entries)
		slices.SortFunc(sorted, byPath)
	}
	h := sha256.New()
	var line []byte
	for _, e := range sorted {
		line = appendTreeLine(line[:0], e)
		h.Write(line)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

func byPath(a, b Entry) int { return strings.Compare(a.Path, b.Path) }

// appendTreeLine appends e's line of a tree digest to b:
// path NUL type NUL mode (octal, at least 4 digits) NUL uid NUL gid NUL
// size NUL sha256 NUL target LF (what fmt's "%s\x00%s\x00%04o\x00%d\x00%d\x00%d\x00%s\x00%s\n" writes).
func appendTreeLine(b []byte, e Entry) []byte {
	b = append(b, e.Path...)
	b = append(b, 0)
	b = append(b, e.Type...)
	b = append(b, 0)
	var digits [11]byte
	mode := strconv.AppendUint(digits[:0], uint64(uint32(e.Mode)), 8)
	for range 4 - len(mode) {
		b = append(b, '0')
	}
	b = append(b, mode...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(e.UID), 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(e.GID), 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, 0)
	b = append(b, e.SHA256...)
	b = append(b, 0)
	b = append(b, e.Target...)
	return append(b, '\n')
}
