package overlayfs

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// RebuildLayer writes the layer of ch, an overlay the node has applied,
// anew from its payload, and puts it in place of the layer directory the
// node has, which drifted (verify-sequence --files): the new directory is
// written and synced beside it, a journal ("repair") is written, the two
// are exchanged atomically (renameat2 RENAME_EXCHANGE: the layer's path
// never goes missing, so a crash leaves the old or the new layer), the
// stacks of a running node are rebuilt on it, and the old directory and
// the journal are removed. After a crash, Recover restacks from the
// ledger before it removes the other copy. ch.Record is the ledger record
// of the overlay's apply. The ledger does not change.
func (b *Backend) RebuildLayer(ctx context.Context, ch *nodestate.Change) error {
	v := ch.Manifest.Version
	if err := b.checkLayers(); err != nil {
		return err
	}
	if fi, err := os.Lstat(b.layerDir(v)); err != nil || !fi.IsDir() {
		return fmt.Errorf("rebuilding layer %s: %s is missing or not a directory: %w", v, b.layerDir(v), nodestate.ErrDrift)
	}
	fresh := b.newLayerDir(v)
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("rebuilding layer %s: %w", v, err)
	}
	if err := writeLayer(ctx, fresh, ch); err != nil {
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
	if err := unix.Renameat2(unix.AT_FDCWD, fresh, unix.AT_FDCWD, b.layerDir(v), unix.RENAME_EXCHANGE); err != nil {
		return errors.Join(fmt.Errorf("rebuilding layer %s: exchanging %s and %s: %w", v, fresh, b.layerDir(v), err), os.RemoveAll(fresh), os.Remove(b.journalPath()))
	}
	if err := safefile.SyncDir(b.layersDir()); err != nil {
		return err
	}
	fault.Point("repair-exchanged")
	l, err := b.n.ReadLedger()
	if err != nil {
		return err
	}
	if err := b.restackLive(applied(l)); err != nil {
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

// ignoreMissing drops a not-exist error.
func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// LayerHas reports whether the layer directory of version holds rel
// (slash-separated, resolved beneath the layer without following
// symlinks), or a symlink on the way to it: something there may make the
// stack differ from the overlay.
func (b *Backend) LayerHas(version, rel string) bool {
	dfd, err := unix.Open(b.layerDir(version), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
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
