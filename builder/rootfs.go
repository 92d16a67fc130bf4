package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// pseudoDirs are the directories of a root file system whose contents are
// never part of an image: device nodes, kernel file systems and scratch
// space, all made at boot. The directories themselves are kept.
var pseudoDirs = []string{"dev", "proc", "sys", "run", "tmp"}

// dropFromRootfs reports whether rel is left out of a tree taken from a
// root file system (a tar, image or debootstrap base, or the tree after
// run steps): anything below the pseudo directories, strata's node state
// and image manifest, and the trusted keys, which every build writes
// afresh from its own trust set.
func dropFromRootfs(rel string) bool {
	for _, d := range pseudoDirs {
		if rel != d && manifests.Within(rel, d) {
			return true
		}
	}
	return manifests.IsNodeState(rel) || rel != manifests.KeysDir && manifests.Within(rel, manifests.KeysDir)
}

// useDir makes the layout the tree found at dir (entries from a scan of
// it): owners and modes as they are, content read from dir.
func (l *layout) useDir(dir string, entries []manifests.Entry) {
	l.state = tree.NewState(entries)
	l.src = make(map[string]source, len(entries))
	for _, e := range entries {
		if e.Type == manifests.TypeFile {
			l.src[e.Path] = source{host: filepath.Join(dir, filepath.FromSlash(e.Path))}
		}
	}
}

// scanRootfs scans a root file system directory under the rootfs rules.
func scanRootfs(dir string) ([]manifests.Entry, error) {
	return tree.Scan(dir, dropFromRootfs)
}

// blobs stages file contents by SHA-256 in a directory made on first use
// below parent; Close removes it.
type blobs struct {
	parent string
	dir    string
}

// put stores r's content and returns its hex SHA-256 and length.
func (b *blobs) put(r io.Reader) (string, int64, error) {
	if b.dir == "" {
		d, err := os.MkdirTemp(b.parent, ".build-")
		if err != nil {
			return "", 0, fmt.Errorf("staging base content: %w", err)
		}
		b.dir = d
	}
	f, err := os.CreateTemp(b.dir, ".blob-")
	if err != nil {
		return "", 0, fmt.Errorf("staging base content: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(f, io.TeeReader(r, h))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, fmt.Errorf("staging base content in %s: %w", f.Name(), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(f.Name(), b.path(sum)); err != nil {
		os.Remove(f.Name())
		return "", 0, fmt.Errorf("staging base content: %w", err)
	}
	return sum, n, nil
}

func (b *blobs) path(sum string) string { return filepath.Join(b.dir, sum) }

// Close removes the staged contents.
func (b *blobs) Close() error {
	if b.dir == "" {
		return nil
	}
	return os.RemoveAll(b.dir)
}
