package dirfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// checkUndo verifies the undo object saved (what an apply displaced from
// tree path p) against want, the tree the rollback returns to: the object
// and everything below it must be what want has at and below p (type,
// mode, owner, size, content, link target), and nothing else. Undo data
// is node state, which may have been planted: a link where a file was, a
// FIFO, an endless file, altered content or an entry the tree lacks is
// ErrBadState, found before anything is restored; no link is followed and
// no file is read past the size want records.
func checkUndo(saved, p string, want tree.State) error {
	expect := map[string]manifests.Entry{}
	for k, e := range want {
		if k == p || strings.HasPrefix(k, p+"/") {
			expect[k] = e
		}
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("undo data for /%s (%s): %s: %w", p, saved, fmt.Sprintf(format, a...), node.ErrBadState)
	}
	err := filepath.WalkDir(saved, func(host string, d fs.DirEntry, err error) error {
		if err != nil {
			return bad("%v", err)
		}
		rel, err := filepath.Rel(saved, host)
		if err != nil {
			return bad("%v", err)
		}
		path := p
		if rel != "." {
			path = p + "/" + filepath.ToSlash(rel)
		}
		e, ok := expect[path]
		delete(expect, path)
		fi, err := os.Lstat(host)
		if err != nil {
			return bad("%v", err)
		}
		if !ok {
			// Nothing comes back that the tree did not have: not even what
			// the node held besides its tree below a directory the apply
			// displaced (drift then, and indistinguishable from a plant).
			return bad("/%s (%s) was not in the tree before the overlay; remove it from the undo data to roll back without it", path, node.TypeName(fi.Mode()))
		}
		got := manifests.Entry{Path: path, Mode: tree.ModeOf(fi.Mode())}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			got.UID, got.GID = int(st.Uid), int(st.Gid)
		}
		switch {
		case fi.Mode().IsRegular():
			got.Type, got.Size = manifests.TypeFile, fi.Size()
		case fi.IsDir():
			got.Type = manifests.TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			got.Type = manifests.TypeSymlink
			if got.Target, err = os.Readlink(host); err != nil {
				return bad("%v", err)
			}
		default:
			return bad("/%s is a %s", path, node.TypeName(fi.Mode()))
		}
		if got.Type != e.Type || got.UID != e.UID || got.GID != e.GID || (got.Type != manifests.TypeSymlink && got.Mode != e.Mode) || got.Target != e.Target || got.Size != e.Size {
			return bad("/%s is %s %04o %d:%d (%d bytes%s), the tree before the overlay had %s %04o %d:%d (%d bytes%s)", path,
				got.Type, uint32(got.Mode), got.UID, got.GID, got.Size, arrow(got.Target), e.Type, uint32(e.Mode), e.UID, e.GID, e.Size, arrow(e.Target))
		}
		if got.Type == manifests.TypeFile {
			sum, err := hashBounded(host, e.Size)
			if err != nil {
				return bad("%v", err)
			}
			if sum != e.SHA256 {
				return bad("/%s has content sha256 %s, the tree before the overlay had %s", path, sum, e.SHA256)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for path := range expect {
		return bad("/%s is missing", path)
	}
	return nil
}

func arrow(target string) string {
	if target == "" {
		return ""
	}
	return " -> " + target
}

// hashBounded hashes the regular file at host (no link followed), reading
// at most size+1 bytes: a file that grew is an error, not a long read.
func hashBounded(host string, size int64) (string, error) {
	f, err := safefile.Open(host)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, size+1))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%s changed while read", host)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
