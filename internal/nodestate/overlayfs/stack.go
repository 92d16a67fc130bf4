package overlayfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Live reports whether the node's stacks are active: the image clone is
// mounted (by Activate).
func (b *Backend) Live() (bool, error) {
	ms, err := mounts()
	if err != nil {
		return false, err
	}
	return isMountPoint(ms, b.ImageDir()), nil
}

// Activate makes the node's managed hierarchies the stacks its ledger
// says: the image clone is mounted first when it is not, then each stack
// is built (or rebuilt) from the layers in effect. It is what a node's
// initramfs runs before PID 1, and it is idempotent.
func (b *Backend) Activate(ctx context.Context) error {
	l, err := b.n.ReadLedger()
	if err != nil {
		return err
	}
	if j, err := b.readJournal(); err != nil {
		return err
	} else if j != nil {
		// A crash interrupted a switch: settle it from the ledger first.
		if _, err := b.Recover(ctx, l); err != nil {
			return err
		}
	}
	ms, err := mounts()
	if err != nil {
		return err
	}
	if !isMountPoint(ms, b.ImageDir()) {
		if err := cloneRoot(b.n.Root, b.ImageDir()); err != nil {
			return err
		}
		// The first activation since boot: /run is new at every boot.
		stamp := []byte(time.Now().UTC().Format(time.RFC3339) + "\n")
		if err := writeNoFollow(filepath.Join(b.run, "strata", "activated"), stamp); err != nil {
			return fmt.Errorf("recording the activation: %w", err)
		}
	}
	// On a trial boot of a staged upgrade the layers it keeps are
	// stacked; the ledger itself (which Recover prunes by) still lists
	// every layer, so a fallback to the old image finds them all.
	ev, err := b.n.Effective()
	if err != nil {
		return err
	}
	_, err = b.stackOrRefuse(ctx, ev.Ledger.Applied())
	return err
}

// stackOrRefuse stacks the layers of applied (oldest first). A layer
// whose record its signed manifest does not back (signedRecords), or
// whose image does not match its record, is not stacked, and neither is
// anything above it: the stacks hold the layers below it, a tree the
// node had before, and the refusal is recorded for status, /health and
// metrics (LayerIntegrity), and returned; only a refusal that cannot be
// recorded is an error. The node goes on with that tree until the layer
// is set right; applies wait for that (Check). Once every layer is
// stacked, a refusal recorded before is dropped.
func (b *Backend) stackOrRefuse(ctx context.Context, applied []manifests.LedgerEntry) (*refusedError, error) {
	layers := refs(applied)
	refused, unsigned, err := b.signedRecords(applied)
	if err != nil {
		return nil, err
	}
	if refused != nil {
		layers = layers[:refused.at]
	}
	err = b.restack(ctx, layers)
	var bad *refusedError
	switch {
	case err == nil:
	case !errors.As(err, &bad):
		return nil, err
	default:
		refused = bad
		below := layers[:bad.at]
		if serr := b.restack(ctx, below); serr != nil {
			return nil, errors.Join(err, fmt.Errorf("stacking the %d layers below %s: %w", len(below), bad.version, serr))
		}
		layers = below
	}
	// Of the layers no signature covers, those stacked.
	stacked := map[string]bool{}
	for _, l := range layers {
		stacked[l.Version] = true
	}
	unsigned = slices.DeleteFunc(unsigned, func(v string) bool { return !stacked[v] })
	if err := b.recordUnsigned(unsigned); err != nil {
		return nil, err
	}
	if refused == nil {
		return nil, b.clearRefusal()
	}
	if rerr := b.recordRefusal(refused); rerr != nil {
		return nil, errors.Join(refused, rerr)
	}
	return refused, nil
}

// signedRecords checks the records of applied against their stored,
// signed manifests with the keys of the image below the stacks
// (nodestate.Node.SignedRecords), and returns the first record that
// fails as a refusal.
//
// It also returns the layers below that whose signed manifest records
// no layer image (nodestate.UnsignedLayer).
func (b *Backend) signedRecords(applied []manifests.LedgerEntry) (*refusedError, []string, error) {
	trust, err := b.imageKeys()
	if err != nil {
		return nil, nil, err
	}
	at, unsigned, err := b.n.SignedRecords(trust, applied)
	var versions []string
	for _, u := range unsigned {
		versions = append(versions, u.Version)
	}
	if at < 0 {
		return nil, versions, nil
	}
	v := applied[at].Version
	return &refusedError{at: at, version: v, err: fmt.Errorf("layer %s: %w: %w", v, ErrLayerRefused, err),
		hint: "the node's state was changed after the apply, which a repair cannot undo: audit it with strata verify-sequence --pub from a trusted system, and provision it anew"}, versions, nil
}

// imageKeys are the keys the image below the stacks trusts: the files
// of its key directory, read from the image clone (read-only; on a
// dm-verity root every block of it checked), not through a stack.
func (b *Backend) imageKeys() (*sign.KeySet, error) {
	ks, err := sign.LoadDir(filepath.Join(b.ImageDir(), manifests.KeysDir))
	if err != nil {
		return nil, fmt.Errorf("reading the image's keys: %w", err)
	}
	return ks, nil
}

// restackLiveOrRefuse is stackOrRefuse on an active node; an inactive
// node takes its layers at the next Activate.
func (b *Backend) restackLiveOrRefuse(ctx context.Context, applied []manifests.LedgerEntry) (*refusedError, error) {
	live, err := b.Live()
	if err != nil || !live {
		return nil, err
	}
	return b.stackOrRefuse(ctx, applied)
}

// restackLive rebuilds the stacks when the node is active; an inactive
// node (a disk not booted, a tree not activated) takes its layers at the
// next Activate.
func (b *Backend) restackLive(ctx context.Context, layers []layerRef) error {
	live, err := b.Live()
	if err != nil || !live {
		return err
	}
	if err := b.restack(ctx, layers); err != nil {
		return err
	}
	// Every layer is stacked: a refusal no longer stands.
	return b.clearRefusal()
}

// restack puts, on each managed hierarchy, the stack of layers (oldest
// first) above the image, replacing the stack in place atomically. A
// layer image is checked against its record and mounted first
// (mountLayer); one that does not match is a *refusedError, and no stack
// changes. Layer images no stack uses any more are detached.
func (b *Backend) restack(ctx context.Context, layers []layerRef) error {
	if err := b.checkLayers(); err != nil {
		return err
	}
	ms, err := mounts()
	if err != nil {
		return err
	}
	roots := make([]string, len(layers))
	keep := map[string]bool{}
	for i, l := range layers {
		if l.Image == nil {
			if fi, err := os.Lstat(b.layerDir(l.Version)); err != nil || !fi.IsDir() {
				return fmt.Errorf("stacking layer %s: %s is missing or not a directory: %w", l.Version, b.layerDir(l.Version), nodestate.ErrDrift)
			}
			roots[i] = b.layerDir(l.Version)
			continue
		}
		dir, err := b.mountLayer(ctx, l, ms)
		if errors.Is(err, ErrLayerRefused) {
			return &refusedError{at: i, version: l.Version, err: err}
		}
		if err != nil {
			return err
		}
		roots[i], keep[dir] = dir, true
	}
	if ms, err = mounts(); err != nil {
		return err
	}
	for _, h := range b.managed() {
		target := filepath.Join(b.n.Root, h)
		var lowers []string
		for i := len(layers) - 1; i >= 0; i-- {
			if p := filepath.Join(roots[i], h); isDir(p) {
				lowers = append(lowers, p)
			}
		}
		top, mounted := topMount(ms, target)
		ours := mounted && top.FSType == "overlay" && top.Source == "strata"
		if len(lowers) == 0 {
			if !ours {
				continue
			}
			// The last layer of h goes: a stack of an empty directory
			// over the image replaces it the same way as any other, so
			// what is mounted below h (systemd's /etc/machine-id) is
			// carried over instead of dropped with an unmount.
			empty, err := b.emptyLayer()
			if err != nil {
				return err
			}
			lowers = append(lowers, empty)
		}
		lowers = append(lowers, filepath.Join(b.ImageDir(), h))
		mfd, err := mountStack(filepath.Join(b.run, "strata", "staging"), lowers)
		if err != nil {
			return fmt.Errorf("stacking /%s: %w", h, err)
		}
		err = attach(mfd, target, ours, ms)
		unix.Close(mfd)
		if err != nil {
			return err
		}
	}
	return b.unmountStale(keep)
}

// emptyLayer returns an empty directory below the run directory, the
// layer of a stack that has none left (overlayfs needs two lower layers).
func (b *Backend) emptyLayer() (string, error) {
	dir := filepath.Join(b.run, "strata", "empty")
	if err := safefile.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("making the empty layer: %w", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		return "", fmt.Errorf("the empty layer %s is not empty (%d entries) or unreadable: %v", dir, len(ents), err)
	}
	return dir, nil
}

// Scan lists the node's tree as it is in effect: the managed hierarchies
// from their stacks, everything else from the image (the rest of the root
// is read-only; what is mounted over it, such as /var, is the node's own
// data, not part of the tree). The node must be active.
func (b *Backend) Scan(ctx context.Context) ([]manifests.Entry, error) {
	live, err := b.Live()
	if err != nil {
		return nil, err
	}
	if !live {
		return nil, fmt.Errorf("scanning node %s: its stacks are not active (run strata activate)", b.n.Root)
	}
	hier := b.managed()
	out, err := tree.ScanContext(ctx, b.ImageDir(), func(p string) bool {
		return manifests.IsNodeState(p) || hierarchyOf(hier, p) != ""
	})
	if err != nil {
		return nil, err
	}
	for _, h := range hier {
		sub, err := scanStack(ctx, filepath.Join(b.n.Root, h), h)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
	}
	return out, nil
}

// scanStack lists the tree at dir (as tree path h) as its own mount has
// it, without what is mounted below it: a non-recursive clone is read, so
// systemd's transient /etc/machine-id, say, is not taken for drift.
func scanStack(ctx context.Context, dir, h string) ([]manifests.Entry, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", dir, err)
	}
	defer unix.Close(fd)
	// The trailing slash makes the walk follow the descriptor's link.
	root := fmt.Sprintf("/proc/thread-self/fd/%d/", fd)
	top, err := tree.StatEntry(root, ".")
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", dir, err)
	}
	top.Path = h
	out := []manifests.Entry{top}
	sub, err := tree.ScanContext(ctx, root, func(p string) bool { return manifests.IsNodeState(h + "/" + p) })
	if err != nil {
		// Named by the node's paths, not the descriptor's.
		return nil, &renamedError{msg: strings.ReplaceAll(err.Error(), root, dir+"/"), err: err}
	}
	for _, e := range sub {
		e.Path = h + "/" + e.Path
		out = append(out, e)
	}
	return out, nil
}

// renamedError is err with its message reworded.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// writeNoFollow writes data to the file path (mode 0644), refusing a
// symbolic link there instead of writing where it leads.
func writeNoFollow(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}
