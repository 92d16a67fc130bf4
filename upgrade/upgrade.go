package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/overlay/offline"
)

// Options configures an upgrade.
type Options struct {
	// Image is the squashfs image; its signed manifest lies beside it
	// (NAME.image.json and NAME.image.json.minisig).
	Image string
	// Repo, instead of Image, is a repository (a directory or URL) to
	// take the image from: the newest image of the node's line, or with
	// Compact its regenerated image through the node's head (see
	// node.Node.UpgradeFromRepo). It is copied to a directory made in
	// one of SpoolDirs first.
	Repo string
	// SpoolDirs offer where an image taken from Repo is kept while it is
	// written: the first reachable without a symbolic link
	// (safefile.MkdirTemp; empty: the system's temporary directory).
	SpoolDirs []string
	node.UpgradeOptions
	// DryRun verifies and plans, and writes nothing.
	DryRun bool
	// Tries is how many boots the new image gets to reach health
	// (0: disk.DefaultTries).
	Tries int
	// LockWait is how long to wait for the node's lock.
	LockWait time.Duration
	// Progress, if set, gets a line per step.
	Progress func(string)
	// SecureBoot, on a disk provisioned for Secure Boot, is the db key
	// the new root's unified kernel image is signed with, on systemd's
	// EFI stub Stub ("": disk.DefaultStub); see disk.Target.SignWith.
	// Without it such a disk is refused (disk.ErrSecureBoot).
	SecureBoot *secureboot.Signer
	Stub       string
	// BootImage, on a disk provisioned for Secure Boot, is the new
	// image's boot image (disk.SignImage), signed for any node of the
	// line where the db key is: the new root boots it, and no key is
	// needed (see disk.Target.BootWith). With Repo it need not be given:
	// the one the repository publishes with the image is fetched with
	// it (repo add-image --boot-image).
	BootImage string
	// RotateSecureBoot lets SecureBoot, or the signer of the boot image,
	// be another key than the one that signed the kernel image the node
	// runs (a db key rotation: the machine's db must already hold the new
	// certificate). Without it such a key is refused (disk.ErrSecureBoot).
	RotateSecureBoot bool
}

// Report describes an upgrade.
type Report struct {
	*node.UpgradeReport
	// Disk is the disk written.
	Disk string `json:"disk"`
	// Entry is the boot entry written (nil on a dry run).
	Entry *disk.BootEntry `json:"boot_entry,omitempty"`
	// Kernel and Initrd are the image paths the entry boots.
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	// Abandoned is an earlier upgrade this one dropped first: staged,
	// but interrupted before its boot entry went live, so no boot would
	// have tried it.
	Abandoned *manifests.StagedUpgrade `json:"abandoned,omitempty"`
}

// Disk upgrades the node on diskPath, a provisioned disk that is not
// running, mounted as disk.MountNode mounts it (so this must run in a
// private mount namespace, see disk.Reexec).
//
// It decides before it writes: the upgrade is first planned on the disk
// mounted read-only (o.DryRun stops there), and only a plan that holds is
// carried out, so a refused upgrade leaves the disk byte for byte as it
// was. A disk with a transaction a crash interrupted is settled first,
// as a boot would, and then decides.
func Disk(ctx context.Context, diskPath string, o Options) (rep *Report, err error) {
	dry := o
	dry.DryRun = true
	err = onDisk(ctx, diskPath, offline.MountReadOnly, o.Progress, func(root string, t *disk.Target) error {
		rep, err = run(ctx, root, t, "", dry)
		return err
	})
	if o.DryRun || err != nil && !errors.Is(err, node.ErrInterrupted) && !errors.Is(err, ErrUnbootable) {
		return rep, err
	}
	err = onDisk(ctx, diskPath, offline.Mount, o.Progress, func(root string, t *disk.Target) error {
		rep, err = run(ctx, root, t, "", o)
		return err
	})
	return rep, err
}

// Live upgrades the running node (root /) on its own disk; it must run in
// a private mount namespace (the ESP is mounted there).
func Live(ctx context.Context, o Options) (rep *Report, err error) {
	bootID, err := nodestate.BootID()
	if err != nil {
		return nil, err
	}
	err = onLive(ctx, func(t *disk.Target) error {
		rep, err = run(ctx, "/", t, bootID, o)
		return err
	})
	return rep, err
}

// onDisk mounts the node on diskPath with mount, opens its disk as a
// target and calls fn with both; everything is closed after.
func onDisk(ctx context.Context, diskPath string, mount func(context.Context, string, func(string)) (*disk.Node, error), progress func(string), fn func(root string, t *disk.Target) error) (err error) {
	n, err := mount(ctx, diskPath, progress)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	t, err := n.Target(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	return fn(n.Root, t)
}

// onLive opens the running node's disk as a target and calls fn with it.
func onLive(ctx context.Context, fn func(t *disk.Target) error) (err error) {
	t, err := disk.OpenLive(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	return fn(t)
}

func run(ctx context.Context, root string, t *disk.Target, bootID string, o Options) (*Report, error) {
	if o.Tries == 0 {
		o.Tries = disk.DefaultTries
	}
	if o.SecureBoot != nil {
		t.SignWith(o.SecureBoot, o.Stub, o.RotateSecureBoot)
	}
	if o.BootImage != "" {
		t.BootWith(o.BootImage, o.RotateSecureBoot)
	}
	// A disk that boots signed kernel images upgrading from a repository
	// without the db key takes the boot image published with the image.
	bootFromRepo := false
	if o.Repo != "" && o.SecureBoot == nil && o.BootImage == "" {
		signed, err := t.BootsSigned()
		if err != nil {
			return nil, err
		}
		bootFromRepo = signed
	}
	if !bootFromRepo {
		if err := t.CheckUpgradable(ctx); err != nil {
			return nil, err
		}
	}
	nd, err := node.Open(root, node.Options{LockWait: o.LockWait, Progress: o.Progress})
	if err != nil {
		return nil, err
	}
	abandoned, err := dropUnbootable(ctx, nd, t, o)
	if err != nil {
		return nil, err
	}
	if err := checkActive(root, t); err != nil {
		return nil, err
	}
	if o.Repo != "" {
		dirs := o.SpoolDirs
		if len(dirs) == 0 {
			dirs = []string{os.TempDir()}
		}
		dir, err := safefile.MkdirTemp(dirs, "strata-upgrade-")
		if err != nil {
			return nil, fmt.Errorf("upgrade from %s: %w", o.Repo, err)
		}
		held, err := scratch.Hold(dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("upgrade from %s: %w", o.Repo, err)
		}
		defer held.RemoveAll()
		err = nd.UpgradeFromRepo(ctx, o.Repo, o.Compact, func(r *repo.Repo, ref manifests.ImageRef) error {
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("fetching image %s (%s, %d bytes) from %s", ref.Version, ref.File, ref.Size, o.Repo))
			}
			if bootFromRepo && ref.Boot == nil {
				return fmt.Errorf("%s boots kernel images signed for Secure Boot, and %s publishes image %s without its boot image: sign one where the db key is (strata secure-boot sign-image) and publish it with the image (strata repo add-image --boot-image), or upgrade the disk offline with the key (strata upgrade --disk --secure-boot-key): %w",
					t.Disk, o.Repo, ref.Version, disk.ErrSecureBoot)
			}
			if o.DryRun {
				// A dry run plans from the manifest alone (and the boot
				// image, which it checks as the upgrade would).
				o.Image, err = repo.FetchManifest(ctx, r, ref, dir)
			} else {
				o.Image, err = repo.FetchImageRef(ctx, r, ref, dir)
			}
			if err != nil || !bootFromRepo {
				return err
			}
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("fetching its boot image (%s, %d bytes)", ref.Boot.File, ref.Boot.Size))
			}
			boot, err := repo.FetchBootImage(ctx, r, ref, dir)
			if err != nil {
				return err
			}
			t.BootWith(boot, o.RotateSecureBoot)
			return t.CheckUpgradable(ctx)
		})
		if err != nil {
			return nil, err
		}
	}
	raw, sig, err := readManifest(o.Image)
	if err != nil {
		return nil, err
	}
	rep := &Report{Disk: t.Disk, Abandoned: abandoned}
	write := func(plan *node.UpgradePlan) (node.Slot, error) {
		in, err := t.Install(ctx, o.Image, plan.Image, o.Tries, o.Progress)
		if err != nil {
			return node.Slot{}, err
		}
		rep.Entry, rep.Kernel, rep.Initrd = &in.Entry, in.Kernel, in.Initrd
		return node.Slot{Name: in.Slot, Entry: in.Entry.ID, Commit: in.Commit}, nil
	}
	rep.UpgradeReport, err = nd.Upgrade(ctx, node.UpgradeRequest{Raw: raw, Sig: sig, UpgradeOptions: o.UpgradeOptions, DryRun: o.DryRun, BootID: bootID, Write: write})
	if err == nil && o.DryRun && (o.BootImage != "" || bootFromRepo) {
		// Install checks the boot image before it writes; a dry run
		// checks it here.
		err = t.CheckBootImage(ctx, o.Image, rep.Image)
	}
	return rep, err
}

// ErrUnbootable reports a staged upgrade whose boot entry never went live
// (the upgrade was interrupted just before): no boot will try it. An
// upgrade drops it first; a dry run reports it.
var ErrUnbootable = manifests.Rejection("a staged upgrade has no bootable entry")

// dropUnbootable drops (as upgrade --cancel would) an upgrade staged on
// the node whose boot entry is not bootable, and returns it; a dry run
// refuses with ErrUnbootable instead.
func dropUnbootable(ctx context.Context, nd *node.Node, t *disk.Target, o Options) (*manifests.StagedUpgrade, error) {
	u, err := nodestate.Node{Root: nd.Root()}.Staged()
	if err != nil || u == nil {
		return nil, err
	}
	if ok, err := t.Bootable(u.Entry); err != nil || ok {
		return nil, err
	}
	if o.DryRun {
		return nil, fmt.Errorf("%s: the upgrade to image %s staged at %s was interrupted before its boot entry %s went live, so no boot will try it; strata upgrade drops it and upgrades again, strata upgrade --cancel drops it: %w",
			t.Disk, u.Record.Version, u.Staged, u.Entry, ErrUnbootable)
	}
	if o.Progress != nil {
		o.Progress(fmt.Sprintf("dropping the upgrade to image %s staged at %s: it was interrupted before its boot entry %s went live", u.Record.Version, u.Staged, u.Entry))
	}
	return cancel(ctx, nd, t)
}

// readManifest reads the signed manifest beside image; a missing
// signature is left to the verification to refuse.
func readManifest(image string) (raw, sig []byte, err error) {
	mp := repo.ManifestPath(image)
	if raw, err = safefile.Read(mp, manifests.MaxManifestSize); err != nil {
		return nil, nil, fmt.Errorf("upgrade image %s: its manifest: %w", image, err)
	}
	sig, err = safefile.Read(repo.SigPath(mp), sign.MaxSignatureSize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("upgrade image %s: %w", image, err)
	}
	return raw, sig, nil
}

// checkActive requires the root the node runs to be the one its ledger
// says it runs (with an upgrade staged, node.Node.Upgrade refuses).
func checkActive(root string, t *disk.Target) error {
	n := nodestate.Node{Root: root}
	if u, err := n.Staged(); err != nil || u != nil {
		return err
	}
	l, err := n.ReadLedger()
	if err != nil {
		return err
	}
	want := l.Running().Slot
	if want == "" {
		want = manifests.SlotA
	}
	if t.Active != want {
		return fmt.Errorf("%s: the node runs root %s, its ledger says root %s: %w", t.Disk, t.Active, want, node.ErrDrift)
	}
	return nil
}

// CancelDisk removes the upgrade staged on the disk at diskPath (not
// running; a private mount namespace): its boot entry first, so nothing
// boots it, then the staged state.
func CancelDisk(ctx context.Context, diskPath string, lockWait time.Duration) (u *manifests.StagedUpgrade, err error) {
	// Decided on the disk mounted read-only first: with nothing to
	// cancel, not a byte changes.
	err = onDisk(ctx, diskPath, offline.MountReadOnly, nil, func(root string, t *disk.Target) error {
		nd, err := node.Open(root, node.Options{LockWait: lockWait})
		if err != nil {
			return err
		}
		_, err = nd.CancelUpgrade(ctx, func(u *manifests.StagedUpgrade) error {
			if u.Record.Slot == t.Active {
				return fmt.Errorf("the staged upgrade is on root %s, the root the node runs: %w", u.Record.Slot, node.ErrDrift)
			}
			return errWouldCancel
		})
		return err
	})
	if !errors.Is(err, errWouldCancel) && !errors.Is(err, node.ErrInterrupted) {
		return nil, err
	}
	err = onDisk(ctx, diskPath, offline.Mount, nil, func(root string, t *disk.Target) error {
		nd, err := node.Open(root, node.Options{LockWait: lockWait})
		if err != nil {
			return err
		}
		u, err = cancel(ctx, nd, t)
		return err
	})
	return u, err
}

// errWouldCancel ends CancelDisk's read-only check where the cancel
// would start writing.
var errWouldCancel = errors.New("the cancel holds")

// CancelLive removes the upgrade staged on the running node (a private
// mount namespace).
func CancelLive(ctx context.Context, lockWait time.Duration) (u *manifests.StagedUpgrade, err error) {
	err = onLive(ctx, func(t *disk.Target) error {
		nd, err := node.Open("/", node.Options{LockWait: lockWait})
		if err != nil {
			return err
		}
		u, err = cancel(ctx, nd, t)
		return err
	})
	return u, err
}

func cancel(ctx context.Context, nd *node.Node, t *disk.Target) (*manifests.StagedUpgrade, error) {
	return nd.CancelUpgrade(ctx, func(u *manifests.StagedUpgrade) error {
		if u.Record.Slot == t.Active {
			return fmt.Errorf("the staged upgrade is on root %s, the root the node runs: %w", u.Record.Slot, node.ErrDrift)
		}
		return t.RemoveSlot(u.Record.Slot)
	})
}

// Confirm is the health check and commit of a trial boot on the running
// node (see node.Node.Confirm), with restarter.BootHealth through
// systemctl: no enabled catalog service failed or still starting after
// settle, the checks of the active ones passing.
func Confirm(ctx context.Context, root string, settle, lockWait time.Duration) (*node.ConfirmReport, error) {
	nd, err := node.Open(root, node.Options{LockWait: lockWait})
	if err != nil {
		return nil, err
	}
	return nd.Confirm(ctx, restarter.BootHealth(systemd.NewSystemctl(), root, settle, manifests.ConfirmUnit))
}
