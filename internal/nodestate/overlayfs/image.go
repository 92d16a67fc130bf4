package overlayfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/dmverity"
	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/internal/loop"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

// ErrLayerRefused reports a layer image that does not match the record of
// its apply: it is not stacked, and neither is anything above it. It is
// a rejection (exit 3).
var ErrLayerRefused = manifests.Rejection("overlayfs: layer image refused")

// layerImageExt ends a layer image's file name.
const layerImageExt = ".erofs"

func (b *Backend) layerFile(v string) string {
	return filepath.Join(b.layersDir(), v+layerImageExt)
}
func (b *Backend) newLayerFile(v string) string {
	return filepath.Join(b.layersDir(), ".new-"+v+layerImageExt)
}

// layerMounts is where layer images are mounted, one directory each.
func (b *Backend) layerMounts() string { return filepath.Join(b.run, "strata", "layers") }

// layerRef is one layer of a stack: an applied overlay's layer image (as
// its apply recorded it) or, for a layer written before layer images, its
// directory.
type layerRef struct {
	Version string
	Image   *manifests.LayerImage // nil: a layer directory
	staged  bool                  // the staged new image of an apply
}

// refs lists the layers of ledger records, oldest first.
func refs(entries []manifests.LedgerEntry) []layerRef {
	out := make([]layerRef, 0, len(entries))
	for _, e := range entries {
		out = append(out, layerRef{Version: e.Version, Image: e.Layer})
	}
	return out
}

// path is the layer's image file or directory.
func (b *Backend) path(r layerRef) string {
	switch {
	case r.Image == nil:
		return b.layerDir(r.Version)
	case r.staged:
		return b.newLayerFile(r.Version)
	}
	return b.layerFile(r.Version)
}

// writeLayerImage writes the layer image of ch to the new file path
// (layer.Write), synced, and returns what the apply records of it and
// the file kept for the apply's own mounts (keepWritten; nil when it
// could not be kept).
func writeLayerImage(ctx context.Context, path string, ch *nodestate.Change) (li *manifests.LayerImage, k *kept, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("writing layer image: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing layer image %s: %w", path, cerr)
		}
		if err != nil {
			k.close()
			k = nil
			_ = os.Remove(path)
		}
	}()
	li, err = layer.Write(ctx, f, ch.Manifest, ch.After, ch.Payload)
	if errors.Is(err, layer.ErrParent) {
		err = fmt.Errorf("writing layer: %w: %w", nodestate.ErrDrift, err)
	}
	if err == nil {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("writing layer image %s: %w", path, err)
		}
	}
	if err == nil {
		k = keepWritten(f, path, li)
	}
	return li, k, err
}

// sameLayer checks the layer image a node wrote of overlay m (li)
// against the one m's publisher signed, if m has that record.
func sameLayer(m *manifests.OverlayManifest, li *manifests.LayerImage) error {
	if m.Layer == nil || *m.Layer == *li {
		return nil
	}
	return fmt.Errorf("layer %s: the image written here (sha256 %s, %d bytes, root hash %s) is not the one the overlay's signed manifest records (sha256 %s, %d bytes, root hash %s): the tree below the overlay is not the line's: %w",
		m.Version, li.SHA256, li.Size, li.RootHash, m.Layer.SHA256, m.Layer.Size, m.Layer.RootHash, nodestate.ErrDrift)
}

// openLayerImage opens r's image file (a regular file, no link
// followed) and checks it against the record of its apply: its size and
// its SHA-256 (not hashed again when mounting, fresh, the image this
// apply has just written and checked: isWritten). A mismatch is
// ErrLayerRefused.
func (b *Backend) openLayerImage(ctx context.Context, r layerRef, fresh bool) (*os.File, error) {
	p := b.path(r)
	f, err := openDetached(p)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w: %w", r.Version, ErrLayerRefused, err)
	}
	// The node's own path names it (an initramfs sees the node's root
	// at /root).
	shown := p
	if rel, err := filepath.Rel(b.n.Root, p); err == nil && filepath.IsLocal(rel) {
		shown = "/" + filepath.ToSlash(rel)
	}
	refuse := func(format string, a ...any) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("layer %s: %w: %s: %s", r.Version, ErrLayerRefused, shown, fmt.Sprintf(format, a...))
	}
	fi, err := f.Stat()
	if err != nil {
		return refuse("%v", err)
	}
	if fi.Size() != r.Image.Size {
		return refuse("%d bytes, its apply wrote %d", fi.Size(), r.Image.Size)
	}
	if fresh && b.isWritten(r, f) {
		return f, nil
	}
	sum, _, err := digestImage(ctx, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if sum != r.Image.SHA256 {
		return refuse("sha256 %s, its apply wrote %s", sum, r.Image.SHA256)
	}
	return f, nil
}

// openDetached opens the regular file at path for reading, without
// following a link, through a private clone of the mount that holds it
// (open_tree OPEN_TREE_CLONE, as overlayfs takes its layers): a loop
// device reading the file then pins that clone, not the node's /var, so
// a shutdown can still unmount /var with the layer images in use.
func openDetached(path string) (*os.File, error) {
	dir, name := filepath.Split(path)
	tfd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, &os.PathError{Op: "open_tree", Path: dir, Err: err}
	}
	defer unix.Close(tfd)
	fd, err := unix.Openat2(tfd, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return safefile.Reopen(fd, path)
}

// mountLayer mounts r's image read-only below the run directory, once it
// matches its record, and returns the mount point; an image mounted
// there already (the same file: the mount point names its inode) is
// used as it is.
func (b *Backend) mountLayer(ctx context.Context, r layerRef, ms []mountInfo) (string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(b.path(r), &st); err != nil {
		return "", fmt.Errorf("layer %s: %w: %w", r.Version, ErrLayerRefused, &os.PathError{Op: "lstat", Path: b.path(r), Err: err})
	}
	dir := b.layerMount(r, st.Ino)
	if isMountPoint(ms, dir) {
		return dir, nil
	}
	f, err := b.openLayerImage(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := safefile.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("mounting layer %s: %w", r.Version, err)
	}
	// The device reads the file just checked, through its descriptor.
	if dmverity.Available() == nil {
		err = mountVerified(ctx, r, f, dir)
	} else {
		cfg := loop.Config{ReadOnly: true, SizeLimit: r.Image.DataBlocks * erofs.BlockSize}
		_, err = loop.Mount(fdPath(f), cfg, dir, "erofs", unix.MS_NODEV|unix.MS_NOSUID, "")
	}
	if err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("mounting layer %s: %w", r.Version, err)
	}
	return dir, nil
}

func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// verityPrefix starts the device-mapper name of every layer image
// mapping.
const verityPrefix = "strata-layer-"

// mountVerified maps the checked image f as a dm-verity device (a loop
// device of the whole file is its data and hash device; the root hash is
// the one its apply recorded, which the overlay's signed manifest
// carries) and mounts that read-only on dir: from then on the kernel
// checks every block read, and a changed one reads as an I/O error. The
// mapping is closed deferred, so it goes with the mount.
func mountVerified(ctx context.Context, r layerRef, f *os.File, dir string) error {
	p, root, err := layer.Verity(r.Image)
	if err != nil {
		return err
	}
	dev, lf, err := loop.Attach(fdPath(f), loop.Config{ReadOnly: true})
	if err != nil {
		return err
	}
	defer lf.Close() // the mapping holds the device from here
	// A unique name: the same image may still be mapped for a
	// validation whose namespace is going away.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := verityPrefix + r.Image.SHA256[:16] + "-" + hex.EncodeToString(rnd[:])
	mapped, err := dmverity.Open(ctx, dmverity.Target{Device: dev, Params: p, Root: root}, name)
	if err != nil {
		return err
	}
	if err := unix.Mount(mapped, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return errors.Join(fmt.Errorf("mounting %s (%s) on %s: %w", mapped, dev, dir, err), dmverity.Close(context.WithoutCancel(ctx), name, false))
	}
	if err := dmverity.Close(ctx, name, true); err != nil {
		_ = unix.Unmount(dir, 0)
		return errors.Join(err, dmverity.Close(context.WithoutCancel(ctx), name, false))
	}
	return nil
}

// unmountStale detaches the layer images mounted below the run directory
// that are not in keep (mount points), and removes their directories and
// the empty ones a validation's private mounts left.
func (b *Backend) unmountStale(keep map[string]bool) error {
	ms, err := mounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if filepath.Dir(m.Point) != b.layerMounts() || keep[m.Point] {
			continue
		}
		if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("detaching layer image %s: %w", m.Point, err))
			continue
		}
		_ = os.Remove(m.Point)
	}
	if dmverity.Available() == nil {
		// The kernel removed the mappings of the images detached;
		// their nodes stay.
		_ = dmverity.Prune(verityPrefix) // stale nodes only; nothing depends on it
	}
	ents, _ := os.ReadDir(b.layerMounts())
	for _, e := range ents {
		if p := filepath.Join(b.layerMounts(), e.Name()); !keep[p] && !isMountPoint(ms, p) {
			_ = os.Remove(p) // only an empty directory goes
		}
	}
	return errors.Join(errs...)
}

// refusedError is a layer restack refused: the at'th layer. hint says
// what to do; empty, a repair rewrites the layer image.
type refusedError struct {
	at      int
	version string
	err     error
	hint    string
}

func (e *refusedError) Error() string {
	if e.hint != "" {
		return e.err.Error() + " (" + e.hint + ")"
	}
	return e.err.Error() + " (strata restart --repair rewrites it from its overlay)"
}
func (e *refusedError) Unwrap() error { return e.err }

func (b *Backend) refusalPath() string { return filepath.Join(b.run, "strata", "layer-refused") }

func (b *Backend) recordRefusal(e *refusedError) error {
	cause := schema.RefusedImage
	if e.hint != "" {
		cause = schema.RefusedRecord
	}
	raw, err := manifests.Encode(schema.LayerRefusal{Version: e.version, Error: e.Error(), Time: time.Now().UTC().Format(time.RFC3339), Cause: cause})
	if err != nil {
		return err
	}
	if err := writeNoFollow(b.refusalPath(), raw); err != nil {
		return fmt.Errorf("recording the refused layer %s: %w", e.version, err)
	}
	return nil
}

func (b *Backend) clearRefusal() error { return ignoreMissing(os.Remove(b.refusalPath())) }

// unsignedPath lists the stacked layers no signature covers the image of
// (schema.LayerIntegrity.Unsigned), as the last stacking found them.
func (b *Backend) unsignedPath() string { return filepath.Join(b.run, "strata", "layers-unsigned") }

// recordUnsigned records versions as the layers whose images no
// signature covers (none: the record goes).
func (b *Backend) recordUnsigned(versions []string) error {
	if len(versions) == 0 {
		return ignoreMissing(os.Remove(b.unsignedPath()))
	}
	raw, err := manifests.Encode(versions)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.unsignedPath()), 0o755); err != nil {
		return fmt.Errorf("recording the layers no signature covers: %w", err)
	}
	if err := writeNoFollow(b.unsignedPath(), raw); err != nil {
		return fmt.Errorf("recording the layers no signature covers: %w", err)
	}
	return nil
}

// markUnsigned adds v to the layers no signature covers (add), or takes
// it off.
func (b *Backend) markUnsigned(v string, add bool) error {
	vs, err := b.unsigned()
	if err != nil {
		return err
	}
	vs = slices.DeleteFunc(vs, func(x string) bool { return x == v })
	if add {
		vs = append(vs, v)
	}
	return b.recordUnsigned(vs)
}

// unsigned reads what recordUnsigned recorded.
func (b *Backend) unsigned() ([]string, error) {
	raw, err := safefile.Read(b.unsignedPath(), 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the layers no signature covers: %w", err)
	}
	var vs []string
	if err := manifests.Decode(raw, &vs); err != nil {
		return nil, fmt.Errorf("reading the layers no signature covers, %s: %w", b.unsignedPath(), err)
	}
	return vs, nil
}

// refusal returns the layer image the last activation refused, if that
// still stands (nil when every layer is stacked).
func (b *Backend) refusal() (*schema.LayerRefusal, error) {
	raw, err := safefile.Read(b.refusalPath(), 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the refused layer: %w", err)
	}
	var r schema.LayerRefusal
	if err := manifests.Decode(raw, &r); err != nil {
		return nil, fmt.Errorf("reading the refused layer %s: %w", b.refusalPath(), err)
	}
	return &r, nil
}

// LayerIntegrity says how the node's layers are checked, counts them by
// form, and names the layer image its activation refused, if that still
// stands. It changes nothing.
func (b *Backend) LayerIntegrity() (*schema.LayerIntegrity, error) {
	l, err := b.n.ReadLedger()
	if err != nil {
		return nil, err
	}
	li := &schema.LayerIntegrity{}
	if li.Mode, err = b.layerMode(); err != nil {
		return nil, err
	}
	for _, r := range refs(l.Applied()) {
		if r.Image != nil {
			li.Images++
		} else {
			li.Directories++
		}
	}
	if li.Directories > 0 && li.Images == 0 {
		li.Mode = schema.LayersAudited
	}
	if li.Refused, err = b.refusal(); err != nil {
		return nil, err
	}
	if li.Unsigned, err = b.unsigned(); err != nil {
		return nil, err
	}
	return li, nil
}

// layerMode says how the layer images mounted now are checked: kernel-
// verified when each is a dm-verity device, digest-checked (at
// activation) when any is a plain loop device. With none mounted (a node
// not active) it is the mode the next activation takes.
func (b *Backend) layerMode() (string, error) {
	ms, err := mounts()
	if err != nil {
		return "", err
	}
	verified, plain := 0, 0
	for _, m := range ms {
		switch {
		case filepath.Dir(m.Point) != b.layerMounts():
		case strings.HasPrefix(m.Source, "/dev/mapper/"+verityPrefix):
			verified++
		default:
			plain++
		}
	}
	switch {
	case plain > 0:
		return schema.LayersDigestChecked, nil
	case verified > 0 || dmverity.Available() == nil:
		return schema.LayersKernelVerified, nil
	}
	return schema.LayersDigestChecked, nil
}

// CheckLayers checks each applied layer image against the record of its
// apply (its size and SHA-256: one hash per layer), changing nothing. A
// layer written before layer images has no such record; the file audit
// walks it.
func (b *Backend) CheckLayers(ctx context.Context) ([]nodestate.LayerProblem, error) {
	l, err := b.n.ReadLedger()
	if err != nil {
		return nil, err
	}
	var out []nodestate.LayerProblem
	for _, r := range refs(l.Applied()) {
		if r.Image == nil {
			continue
		}
		f, err := b.openLayerImage(ctx, r, false)
		if errors.Is(err, ErrLayerRefused) {
			rel, _ := filepath.Rel(b.n.Root, b.path(r))
			out = append(out, nodestate.LayerProblem{Version: r.Version, Path: filepath.ToSlash(rel), Msg: err.Error()})
			continue
		}
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	return out, nil
}
