package overlayfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// appliedRef returns the layer of the applied overlay version, as the
// ledger records its apply.
func (b *Backend) appliedRef(version string) (layerRef, error) {
	l, err := b.n.ReadLedger()
	if err != nil {
		return layerRef{}, err
	}
	for _, r := range refs(l.Applied()) {
		if r.Version == version {
			return r, nil
		}
	}
	return layerRef{}, fmt.Errorf("layer %s: not an applied overlay of the ledger: %w", version, nodestate.ErrDrift)
}

// RebuildLayer writes the layer of ch, an overlay the node has applied,
// anew from its payload, and puts it in place of the layer the node has,
// which drifted or was refused (verify-sequence --files): the new image
// (or, for a layer written before layer images, directory) is written
// and synced beside it, a journal ("repair") is written, the two are
// exchanged atomically (renameat2 RENAME_EXCHANGE: the layer's path
// never goes missing, so a crash leaves the old or the new layer), the
// stacks of a running node are rebuilt on it, and the old copy and the
// journal are removed. A rebuilt image must be the one the apply
// recorded, byte for byte. After a crash, Recover restacks from the
// ledger before it removes the other copy. ch.Record is the ledger record
// of the overlay's apply. The ledger does not change.
func (b *Backend) RebuildLayer(ctx context.Context, ch *nodestate.Change) error {
	v := ch.Manifest.Version
	if err := b.checkLayers(); err != nil {
		return err
	}
	ref, err := b.appliedRef(v)
	if err != nil {
		return err
	}
	cur, fresh := b.layerDir(v), b.newLayerDir(v)
	if ref.Image != nil {
		cur, fresh = b.layerFile(v), b.newLayerFile(v)
	}
	if fi, err := os.Lstat(cur); err != nil || fi.IsDir() != (ref.Image == nil) {
		return fmt.Errorf("rebuilding layer %s: %s is missing or not what its apply wrote: %w", v, cur, nodestate.ErrDrift)
	}
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("rebuilding layer %s: %w", v, err)
	}
	if ref.Image == nil {
		err = writeLayer(ctx, fresh, ch)
	} else {
		err = b.rewriteImage(ctx, fresh, ch, ref.Image)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("rebuilding layer %s: %w", v, err), os.RemoveAll(fresh))
	}
	if err := safefile.SyncFS(b.layersDir()); err != nil {
		return errors.Join(err, os.RemoveAll(fresh))
	}
	// The journal makes the next run's recovery restack before it
	// removes the other copy, which the stacks may still use.
	raw, err := manifests.Encode(journal{Kind: "repair", Record: ch.Record})
	if err != nil {
		return errors.Join(err, os.RemoveAll(fresh))
	}
	if err := safefile.WriteAtomic(b.journalPath(), raw, 0o600); err != nil {
		// Nothing is exchanged yet: take it all back.
		return errors.Join(err, os.RemoveAll(fresh), ignoreMissing(os.Remove(b.journalPath())))
	}
	if err := unix.Renameat2(unix.AT_FDCWD, fresh, unix.AT_FDCWD, cur, unix.RENAME_EXCHANGE); err != nil {
		return errors.Join(fmt.Errorf("rebuilding layer %s: exchanging %s and %s: %w", v, fresh, cur, err), os.RemoveAll(fresh), os.Remove(b.journalPath()))
	}
	if err := safefile.SyncDir(b.layersDir()); err != nil {
		return err
	}
	fault.Point("repair-exchanged")
	l, err := b.n.ReadLedger()
	if err != nil {
		return err
	}
	// Another layer image may still be refused (a repair rebuilds them
	// one by one): the stacks then hold the layers below that one.
	refused, err := b.restackLiveOrRefuse(ctx, l.Applied())
	if err == nil && refused != nil && refused.version == v {
		err = refused
	}
	if err != nil {
		// The journal stays: the next run restacks before it removes
		// anything.
		return fmt.Errorf("rebuilding layer %s: restacking: %w", v, err)
	}
	fault.Point("repair-restacked")
	// fresh now holds the drifted layer, which nothing uses any more.
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("rebuilding layer %s: removing the drifted copy: %w", v, err)
	}
	if err := os.Remove(b.journalPath()); err != nil {
		return fmt.Errorf("rebuilding layer %s: removing the journal: %w", v, err)
	}
	return nil
}

// rewriteImage writes ch's layer image to fresh and checks it is the one
// the apply recorded (want).
func (b *Backend) rewriteImage(ctx context.Context, fresh string, ch *nodestate.Change, want *manifests.LayerImage) error {
	got, k, err := writeLayerImage(ctx, fresh, ch)
	k.close()
	if err != nil {
		return err
	}
	if err := sameLayer(ch.Manifest, got); err != nil {
		return err
	}
	if *got != *want {
		return fmt.Errorf("the image written anew (sha256 %s, %d bytes) is not the one its apply wrote (sha256 %s, %d bytes): the overlay or the tree below it differs from then: %w", got.SHA256, got.Size, want.SHA256, want.Size, nodestate.ErrDrift)
	}
	return nil
}

// ignoreMissing drops a not-exist error.
func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// LayerHas reports whether the layer of version holds rel
// (slash-separated, resolved beneath the layer without following
// symlinks), or a symlink on the way to it: something there may make the
// stack differ from the overlay. A layer image that is not mounted may
// hold anything: it reports true.
func (b *Backend) LayerHas(version, rel string) bool {
	root := b.layerDir(version)
	if ref, err := b.appliedRef(version); err == nil && ref.Image != nil {
		var ok bool
		if root, ok = b.mountedImage(ref); !ok {
			return true
		}
	}
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		// Not there; anything else (a symlink planted on the way) is
		// drift of this layer.
		return !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR)
	}
	unix.Close(fd)
	return true
}

// mountedImage returns where r's image file is mounted, if it is. Its
// digest is not read again here (a repair asks for every drifted path):
// it matched when it was mounted, and an image changed since is one
// CheckLayers names, which a repair rebuilds whatever it holds.
func (b *Backend) mountedImage(r layerRef) (string, bool) {
	ms, err := mounts()
	if err != nil {
		return "", false
	}
	m, ok := b.imageMount(ms, r)
	return m.Point, ok
}

// imageMount returns the mount, in the table ms, at the mount point of
// r's image file, if there is one.
func (b *Backend) imageMount(ms []mountInfo, r layerRef) (mountInfo, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(b.path(r), &st); err != nil {
		return mountInfo{}, false
	}
	return topMount(ms, b.layerMount(r, st.Ino))
}

// layerMount is the mount point of r's image file, inode ino.
func (b *Backend) layerMount(r layerRef, ino uint64) string {
	return filepath.Join(b.layerMounts(), r.Version+"-"+r.Image.SHA256[:16]+"-"+strconv.FormatUint(ino, 10))
}
