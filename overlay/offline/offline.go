package offline

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-dev/strata/builder/disk"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
)

// Mount mounts the node on diskPath the way its initramfs does
// (disk.MountNode) and activates it (overlay.Activate: an interrupted
// switch is settled, as a boot would). Close the node when done.
func Mount(ctx context.Context, diskPath string, progress func(string)) (*disk.Node, error) {
	n, err := disk.MountNode(ctx, diskPath, progress)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(fmt.Sprintf("activating the node on %s", diskPath))
	}
	if _, err := overlay.Activate(ctx, n.Root, ""); err != nil {
		return nil, errors.Join(fmt.Errorf("activating the node on %s: %w", diskPath, err), n.Close())
	}
	return n, nil
}

// Apply applies overlays (src, as overlay.Apply takes them) to the node
// on a disk that is not running, mounted with Mount: the same
// verification, layers and ledger records as on a running node. Nothing
// runs on the disk, so restarts are recorded as pending (o.Restarter is
// ignored) and services' validation commands are not run: they are the
// disk's programs, and this is not the disk's machine. The report's Root is the disk.
func Apply(ctx context.Context, diskPath string, src overlay.Source, o overlay.ApplyOptions) (rep *overlay.ApplyReport, err error) {
	n, err := Mount(ctx, diskPath, o.Progress)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	o.Restarter, o.Offline = nil, true
	rep, err = overlay.Apply(ctx, n.Root, src, o)
	if rep != nil {
		rep.Root = diskPath
	}
	return rep, err
}

// Verify audits the node on a disk that is not running, mounted with
// Mount, as overlay.VerifyNodeAs audits a running one (repoDir, files,
// trust and history as there). The audit's Root is the disk.
func Verify(ctx context.Context, diskPath, repoDir string, files bool, trust, history *sign.KeySet) (a *overlay.Audit, err error) {
	n, err := Mount(ctx, diskPath, nil)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	a, err = overlay.VerifyNodeAs(ctx, n.Root, repoDir, files, trust, history)
	if a != nil {
		a.Root = diskPath
	}
	return a, err
}
