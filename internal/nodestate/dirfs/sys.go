package dirfs

import (
	"os"
	"path"
	"syscall"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"golang.org/x/sys/unix"
)

func owner(fi os.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// dirs resolves directories of a node root for the journal's hot path:
// each directory is opened once (O_PATH, cached) with openat2 and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so an op can neither leave the root
// nor pass through a symlink, and then acts on a single name relative to
// that directory.
type dirs struct {
	root int
	fds  map[string]int
}

func openDirs(root string) (*dirs, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	return &dirs{root: fd, fds: map[string]int{}}, nil
}

// dir returns a descriptor of the directory rel ("" for the root).
func (d *dirs) dir(rel string) (int, error) {
	if rel == "" {
		return d.root, nil
	}
	if fd, ok := d.fds[rel]; ok {
		return fd, nil
	}
	fd, err := unix.Openat2(d.root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	d.fds[rel] = fd
	return fd, nil
}

// at returns the parent directory's descriptor and the base name of rel.
func (d *dirs) at(rel string) (int, string, error) {
	fd, err := d.dir(manifests.Parent(rel))
	return fd, path.Base(rel), err
}

// forget drops cached descriptors of rel and everything below it, after an
// op moved or replaced it.
func (d *dirs) forget(rel string) {
	for p, fd := range d.fds {
		if manifests.Within(p, rel) {
			unix.Close(fd)
			delete(d.fds, p)
		}
	}
}

func (d *dirs) close() {
	d.forget("")
	unix.Close(d.root)
}

// rename moves from to to, both relative to the root.
func (d *dirs) rename(from, to string) error {
	ffd, fbase, err := d.at(from)
	if err != nil {
		return err
	}
	tfd, tbase, err := d.at(to)
	if err != nil {
		return err
	}
	d.forget(from)
	d.forget(to)
	if err := unix.Renameat(ffd, fbase, tfd, tbase); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// mkdir creates the directory rel with e's owner and mode.
func (d *dirs) mkdir(rel string, e manifests.Entry) error {
	fd, base, err := d.at(rel)
	if err != nil {
		return err
	}
	return tree.CreateAt(fd, base, manifests.Entry{Type: manifests.TypeDir, Mode: e.Mode, UID: e.UID, GID: e.GID}, nil)
}

// setMeta sets rel's owner and mode (owner only for a symlink).
func (d *dirs) setMeta(rel string, e manifests.Entry) error {
	fd, base, err := d.at(rel)
	if err != nil {
		return err
	}
	return tree.SetMetaAt(fd, base, e)
}
