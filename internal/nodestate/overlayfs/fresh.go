package overlayfs

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/manifests"
)

// An apply checks the layer image it writes as it writes it: the image's
// SHA-256 and root hash come from the pass that wrote it (layer.Write),
// and Stage compares them with the overlay's signed record. The apply's
// own mounts of that image (its validation's and its switch's) rely on
// that check instead of hashing the file again, as long as the file they
// open is provably the one written and unchanged since: the same device
// and inode as a descriptor opened while the writing one was still open
// (so the inode cannot have been freed and reused), and the same size,
// modification and change times (a write changes the change time, which
// no caller can set back; the switch's rename changes it too, so the
// switch takes it again at the rename). On kernels before 6.13, whose
// file times are coarse, a write within the clock tick of the check can
// leave them equal; that tick is no wider than the window between a
// check and its mount that hashing at the mount leaves anyway. Every
// other open of the image, the audit's and every activation's, hashes
// it.

// digestImage hashes a layer image (tests count the calls).
var digestImage = layer.Digest

// testHookStaged, set by tests, runs once Stage has written, checked and
// kept version v's image.
var testHookStaged func(b *Backend, v string)

// kept is a layer image as the apply that wrote it left it.
type kept struct {
	f  *os.File    // opened as a mount opens it (openDetached)
	st unix.Stat_t // f's status once written and synced (again after the switch's rename)
	li manifests.LayerImage
}

func (k *kept) close() {
	if k != nil {
		k.f.Close()
	}
}

// sameFile reports whether a and b are the same file, unchanged.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// keepWritten opens the image at path, which w has just written and
// synced and which is still open, as a mount opens it, and keeps it if it
// is w's file; else nil.
func keepWritten(w *os.File, path string, li *manifests.LayerImage) *kept {
	f, err := openDetached(path)
	if err != nil {
		return nil
	}
	k := &kept{f: f, li: *li}
	var ws unix.Stat_t
	if unix.Fstat(int(w.Fd()), &ws) != nil || unix.Fstat(int(f.Fd()), &k.st) != nil || !sameFile(&ws, &k.st) {
		f.Close()
		return nil
	}
	return k
}

// keep holds k for version v's mounts in this apply, until Commit or
// Abort (forget).
func (b *Backend) keep(v string, k *kept) {
	if k == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = map[string]*kept{}
	}
	b.written[v].close()
	b.written[v] = k
}

// forget drops what keep holds of version v.
func (b *Backend) forget(v string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written[v].close()
	delete(b.written, v)
}

// isWritten reports whether f, opened to mount r, is the image this apply
// wrote and checked for r's record, unchanged since (see above).
func (b *Backend) isWritten(r layerRef, f *os.File) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.written[r.Version]
	if k == nil || r.Image == nil || *r.Image != k.li {
		return false
	}
	var now, opened unix.Stat_t
	if unix.Fstat(int(k.f.Fd()), &now) != nil || unix.Fstat(int(f.Fd()), &opened) != nil {
		return false
	}
	return sameFile(&now, &k.st) && sameFile(&opened, &k.st)
}

// renameKept renames version v's new image from to to (the switch) and
// keeps what keep holds of it only if it was unchanged up to the rename,
// taking its status again right after (a rename changes the change time).
func (b *Backend) renameKept(v, from, to string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.written[v]
	var st unix.Stat_t
	if k != nil && (unix.Fstat(int(k.f.Fd()), &st) != nil || !sameFile(&st, &k.st)) {
		k.close()
		delete(b.written, v)
		k = nil
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	if k != nil && unix.Fstat(int(k.f.Fd()), &k.st) != nil {
		k.close()
		delete(b.written, v)
	}
	return nil
}
