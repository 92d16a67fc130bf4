package offline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
)

// Mount mounts the node on diskPath the way its initramfs does
// (disk.MountNode) and activates it (node.Node.Activate: an interrupted
// switch is settled, as a boot would). Close the node when done.
func Mount(ctx context.Context, diskPath string, progress func(string)) (*disk.Node, error) {
	return mount(ctx, diskPath, disk.MountNode, progress)
}

// MountReadOnly is Mount with the state partition read-only
// (disk.MountNodeReadOnly): the layers are stacked as they are, nothing is
// settled, and not a byte of the disk changes.
func MountReadOnly(ctx context.Context, diskPath string, progress func(string)) (*disk.Node, error) {
	return mount(ctx, diskPath, disk.MountNodeReadOnly, progress)
}

func mount(ctx context.Context, diskPath string, mountNode mounter, progress func(string)) (*disk.Node, error) {
	n, err := mountNode(ctx, diskPath, progress)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(fmt.Sprintf("activating the node on %s", diskPath))
	}
	nd, err := openNode(n.Root, node.Options{}, nil)
	if err == nil {
		_, err = nd.Activate(ctx)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("activating the node on %s: %w", diskPath, err), n.Close())
	}
	return n, nil
}

// openNode opens the node at root (a disk's mount point) as a node that
// is not running: nothing of it runs, restarts are left as debt. progress
// replaces o.Progress (nil: silent, for the read-only pass that decides).
func openNode(root string, o node.Options, progress func(string)) (*node.Node, error) {
	o.Offline, o.Restarter, o.Progress = true, nil, progress
	return node.Open(root, o)
}

// onNode opens the node at root as openNode does and runs fn on it.
func onNode[T any](root string, o node.Options, progress func(string), fn func(*node.Node) (T, error)) (T, error) {
	nd, err := openNode(root, o, progress)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(nd)
}

// Apply applies overlays (src, as node.Node.Apply takes them) to the
// node on a disk that is not running, mounted with Mount: the same
// verification, layers and ledger records as on a running node. Nothing
// runs on the disk, so restarts are recorded as pending (no.Restarter is
// ignored) and services' validation commands are not run: they are the
// disk's programs, and this is not the disk's machine. The report's Root
// is the disk.
//
// It decides before it writes: the disk is first mounted read-only and
// the apply planned there (o.DryRun stops after that); only when that
// plan holds is the disk mounted read-write and the apply made, so a
// refused apply leaves the disk byte for byte as it was. A disk with a
// transaction a crash interrupted is the exception: the apply settles
// it first, as a boot would, and then decides.
func Apply(ctx context.Context, diskPath string, src node.Source, o node.ApplyOptions, no node.Options) (rep *node.ApplyReport, err error) {
	rep, err = onDisk(ctx, diskPath, MountReadOnly, no.Progress, func(root string) (*node.ApplyReport, error) {
		return onNode(root, no, no.Progress, func(nd *node.Node) (*node.ApplyReport, error) {
			return nd.Apply(ctx, src, node.ApplyOptions{DryRun: true})
		})
	})
	if o.DryRun || err != nil && !errors.Is(err, node.ErrInterrupted) {
		return rep, err
	}
	return onDisk(ctx, diskPath, Mount, no.Progress, func(root string) (*node.ApplyReport, error) {
		return onNode(root, no, no.Progress, func(nd *node.Node) (*node.ApplyReport, error) { return nd.Apply(ctx, src, o) })
	})
}

// onDisk mounts the node on diskPath with mount, runs fn on its root and
// closes it; the report names the disk.
func onDisk(ctx context.Context, diskPath string, mount mounter, progress func(string), fn func(root string) (*node.ApplyReport, error)) (rep *node.ApplyReport, err error) {
	rep, err = withNode(ctx, diskPath, mount, progress, fn)
	if rep != nil {
		rep.Root = diskPath
	}
	return rep, err
}

// mounter is Mount or MountReadOnly.
type mounter func(context.Context, string, func(string)) (*disk.Node, error)

// withNode mounts the node on diskPath with mount, calls fn with its root
// and closes it.
func withNode[T any](ctx context.Context, diskPath string, mount mounter, progress func(string), fn func(root string) (T, error)) (v T, err error) {
	n, err := mount(ctx, diskPath, progress)
	if err != nil {
		return v, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	v, err = fn(n.Root)
	return v, nameDisk(err, n.Root, diskPath)
}

// nameDisk returns err with the mount point root in its message replaced
// by the disk's path: messages name the disk, not where this process
// mounted it.
func nameDisk(err error, root, diskPath string) error {
	if err != nil && strings.Contains(err.Error(), root) {
		return &onDiskError{msg: strings.ReplaceAll(err.Error(), root, diskPath), err: err}
	}
	return err
}

// onDiskError is an error of a node on a disk, its message naming the
// disk instead of the mount point; errors.Is and As see the original.
type onDiskError struct {
	msg string
	err error
}

func (e *onDiskError) Error() string { return e.msg }
func (e *onDiskError) Unwrap() error { return e.err }

// Status reads the status of the node on a disk that is not running,
// mounted read-only (nothing on the disk changes). Its Root is the disk.
// A staged upgrade whose boot entry is not on the ESP (an upgrade
// interrupted just before the entry went live) shows as "interrupted".
func Status(ctx context.Context, diskPath string) (st *node.Status, err error) {
	n, err := MountReadOnly(ctx, diskPath, nil)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	nd, err := openNode(n.Root, node.Options{}, nil)
	if err == nil {
		st, err = nd.Status(ctx)
	}
	if err != nil {
		return nil, nameDisk(err, n.Root, diskPath)
	}
	st.Root = diskPath
	if u := st.Upgrade; u != nil && u.State == node.UpgradeStaged {
		t, err := n.Target(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, t.Close()) }()
		ok, err := t.Bootable(u.Entry)
		if err != nil {
			return nil, err
		}
		if !ok {
			u.State = node.UpgradeInterrupted
		}
	}
	return st, nil
}

// SettlePending settles the restart debt of the node on a disk that is
// not running, as node.Node.SettlePending does on an Offline node:
// nothing runs. It decides before it writes: a node without debt is read
// with the disk mounted read-only and nothing changes.
func SettlePending(ctx context.Context, diskPath string, no node.Options) (*node.SettleReport, error) {
	rep, err := withNode(ctx, diskPath, MountReadOnly, nil, func(root string) (*node.SettleReport, error) {
		return onNode(root, no, nil, func(nd *node.Node) (*node.SettleReport, error) { return nd.SettlePending(ctx) })
	})
	if err == nil || !errors.Is(err, syscall.EROFS) && !errors.Is(err, node.ErrInterrupted) {
		if rep != nil {
			rep.Root = diskPath
		}
		return rep, err
	}
	rep, err = withNode(ctx, diskPath, Mount, no.Progress, func(root string) (*node.SettleReport, error) {
		return onNode(root, no, no.Progress, func(nd *node.Node) (*node.SettleReport, error) { return nd.SettlePending(ctx) })
	})
	if rep != nil {
		rep.Root = diskPath
	}
	return rep, err
}

// Rollback rolls back the node on a disk that is not running as
// node.Node.Rollback does (to as there; restarts are left as debt:
// nothing runs on the disk). It decides before it
// writes: the rollback is first tried on the disk mounted read-only,
// where every check runs and the first write fails; only a rollback that
// got that far is made on the disk mounted read-write. A refused one
// leaves the disk byte for byte as it was. With hold, the node is held
// where the rollback took it (node.Node.RollbackAndHold), so that its
// agent does not apply the same overlays again once it runs.
func Rollback(ctx context.Context, diskPath, to string, hold bool, no node.Options) (*node.RollbackReport, error) {
	roll := func(nd *node.Node) (*node.RollbackReport, error) {
		if hold {
			return nd.RollbackAndHold(ctx, to, "strata rollback --disk")
		}
		return nd.Rollback(ctx, to)
	}
	_, err := withNode(ctx, diskPath, MountReadOnly, nil, func(root string) (*node.RollbackReport, error) {
		return onNode(root, no, nil, roll)
	})
	if err == nil || !errors.Is(err, syscall.EROFS) && !errors.Is(err, node.ErrInterrupted) {
		return nil, err
	}
	rep, err := withNode(ctx, diskPath, Mount, no.Progress, func(root string) (*node.RollbackReport, error) {
		return onNode(root, no, no.Progress, roll)
	})
	if rep != nil {
		rep.Root = diskPath
	}
	return rep, err
}

// Verify audits the node on a disk that is not running, mounted with
// MountReadOnly, as node.Node.Verify audits a running one. The audit's
// Root is the disk.
func Verify(ctx context.Context, diskPath string, o node.VerifyOptions) (a *schema.Audit, err error) {
	// An audit never writes: read-only, nothing settled (an interrupted
	// transaction is reported, not finished).
	n, err := MountReadOnly(ctx, diskPath, nil)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	nd, err := openNode(n.Root, node.Options{}, nil)
	if err == nil {
		a, err = nd.Verify(ctx, o)
	}
	if a != nil {
		a.Root = diskPath
	}
	return a, err
}
