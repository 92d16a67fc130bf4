package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// loadBase fills the empty layout l with the recipe's base tree. Contents
// of tar and image bases are staged in st; trust checks an image base.
func (l *layout) loadBase(ctx context.Context, r *Recipe, s *settings, st *blobs, trust *sign.KeySet) error {
	b := r.Base
	switch {
	case b.Dir != "":
		return l.addHostTree(r.Path(b.Dir), "", b.Preserve)
	case b.Tar != "":
		s.progress("reading base tarball " + r.Path(b.Tar))
		return l.addTar(ctx, r.Path(b.Tar), st)
	case b.Image != "":
		s.progress("reading base image " + r.Path(b.Image))
		return l.addImage(ctx, r.Path(b.Image), st, trust)
	case b.Debootstrap != nil:
		dir, entries, err := debootstrapBase(ctx, b.Debootstrap, s)
		if err != nil {
			return err
		}
		l.useDir(dir, entries)
	}
	return nil
}

// addTar places a root file system tarball (uncompressed, gzip, zstd or
// xz) in the layout with its owners and modes. Under the rootfs rules the
// contents of dev, proc, sys, run and tmp are dropped; a device node or
// FIFO anywhere else is tree.ErrSpecialFile; hard links become regular
// files with their target's content.
func (l *layout) addTar(ctx context.Context, path string, st *blobs) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading base tar: %w", err)
	}
	defer f.Close()
	zr, _, err := compress.NewReader(f)
	if err != nil {
		return fmt.Errorf("reading base tar %s: %w", path, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	seen := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("archive truncated: %w", err)
			}
			return fmt.Errorf("reading base tar %s: %w", path, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := tarPath(h.Name)
		if err != nil {
			return fmt.Errorf("base tar %s: %w", path, err)
		}
		if name == "" || dropFromRootfs(name) {
			continue
		}
		if seen[name] {
			return fmt.Errorf("base tar %s: member %s: %w", path, name, tree.ErrDuplicate)
		}
		seen[name] = true
		if err := l.addTarMember(h, name, tr, st); err != nil {
			return fmt.Errorf("base tar %s: %w", path, err)
		}
	}
}

func (l *layout) addTarMember(h *tar.Header, name string, r io.Reader, st *blobs) error {
	e := manifests.Entry{Path: name, Mode: manifests.Mode(h.Mode & 07777), UID: h.Uid, GID: h.Gid}
	var src source
	switch h.Typeflag {
	case tar.TypeDir:
		e.Type = manifests.TypeDir
	case tar.TypeReg:
		sum, n, err := st.put(r)
		if err != nil {
			return err
		}
		e.Type, e.Size, e.SHA256 = manifests.TypeFile, n, sum
		src.host = st.path(sum)
	case tar.TypeSymlink:
		if err := manifests.CheckLinkTarget(name, h.Linkname); err != nil {
			return fmt.Errorf("member %s: %w", name, err)
		}
		e.Type, e.Mode, e.Target = manifests.TypeSymlink, 0777, h.Linkname
	case tar.TypeLink:
		target, err := tarPath(h.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("member %s: hard link to %q: %w", name, h.Linkname, manifests.ErrUnsafePath)
		}
		te, ok := l.state[target]
		if !ok || te.Type != manifests.TypeFile {
			return fmt.Errorf("member %s: hard link to %s, which is not an earlier regular file: %w", name, target, tree.ErrNotExist)
		}
		e, src = te, l.src[target]
		e.Path = name
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("member %s: device node or FIFO outside /dev: %w", name, tree.ErrSpecialFile)
	default:
		return fmt.Errorf("member %s: unsupported tar type %q: %w", name, h.Typeflag, tree.ErrSpecialFile)
	}
	return l.put(e, src)
}

// tarPath turns a member name ("./etc/x", "etc/x/") into a tree path; ""
// is the root. Absolute and climbing names are refused.
func tarPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("member %q: absolute path: %w", name, manifests.ErrUnsafePath)
	}
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	name = strings.TrimSuffix(name, "/")
	if name == "" || name == "." {
		return "", nil
	}
	if err := manifests.ValidPath(name); err != nil {
		return "", fmt.Errorf("member %q: %w", name, err)
	}
	return name, nil
}
