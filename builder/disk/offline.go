package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/loop"
	"github.com/strata-dev/strata/internal/mountinfo"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/manifests"
)

// Errors about the disk given to MountNode.
var (
	// ErrNotNodeDisk reports a disk without the layout Provision writes
	// (or whose state partition holds no node).
	ErrNotNodeDisk = manifests.Rejection("not a strata node disk")
	// ErrInUse reports a disk another process holds (a running qemu, a
	// concurrent strata).
	ErrInUse = errors.New("disk in use")
)

// Node is the node of a provisioned disk that is not running, mounted
// for offline work in this process's private mount namespace the way its
// initramfs mounts it at boot.
type Node struct {
	// Disk is the disk image file or block device.
	Disk string
	// Root is the node root: root A's squashfs read-only, the state
	// partition's var bound on Root/var, a tmpfs on Root/run; the caller
	// activates the stacks (overlay/offline does).
	Root string
	// State is where the state partition (ext4) is mounted, read-write.
	State string
	// Layout is the disk's partitions; Slot the root partition mounted
	// at Root (the one the node's ledger runs).
	Layout *Layout
	Slot   string

	dir  string // holds Root and State
	scr  *scratch.Dir
	lock *os.File // the disk, with its whole-file lock
}

// MountNode mounts the node on diskPath (a disk image file or a block
// device that is not mounted): from its GPT, root A (read-only) and the
// state partition (read-write), each on a fresh loop device; then it
// binds the state's var on the root's var and puts a tmpfs on its run,
// as the initramfs does before it activates the node. The disk stays locked (an exclusive OFD lock over the
// whole file, which a qemu using it conflicts with) until Close. The
// process must run in a private mount namespace (see Reexec):
// otherwise ErrNotPrivate. progress, if not nil, gets a line per step.
func MountNode(ctx context.Context, diskPath string, progress func(string)) (n *Node, err error) {
	return mountNode(ctx, diskPath, false, progress)
}

// MountNodeReadOnly is MountNode with the state partition mounted
// read-only without replaying its journal (ext4 ro,noload): nothing on
// the disk changes, not a byte, so a command can decide from it before
// it writes (and an audit never writes).
func MountNodeReadOnly(ctx context.Context, diskPath string, progress func(string)) (n *Node, err error) {
	return mountNode(ctx, diskPath, true, progress)
}

func mountNode(ctx context.Context, diskPath string, readOnly bool, progress func(string)) (n *Node, err error) {
	if progress == nil {
		progress = func(string) {}
	}
	if !InPrivateNamespace() {
		return nil, fmt.Errorf("mounting the node on %s: %w", diskPath, ErrNotPrivate)
	}
	f, err := openDisk(diskPath)
	if err != nil {
		return nil, err
	}
	n = &Node{Disk: diskPath, lock: f}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	if n.Layout, err = readLayout(f, diskPath); err != nil {
		return n, err
	}
	state := n.Layout.Part(PartState)
	if n.scr, err = scratch.MkdirTemp("disk"); err != nil {
		return n, fmt.Errorf("mounting the node on %s: %w", diskPath, err)
	}
	n.dir = n.scr.Path
	n.Root, n.State = filepath.Join(n.dir, "root"), filepath.Join(n.dir, "state")
	for _, d := range []string{n.Root, n.State} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return n, fmt.Errorf("mounting the node on %s: %w", diskPath, err)
		}
	}
	data, how := "", ""
	if readOnly {
		data, how = "noload", " read-only"
	}
	progress(fmt.Sprintf("mounting the state partition of %s%s", diskPath, how))
	if _, err := loop.Mount(diskPath, loop.Config{Offset: state.Offset, SizeLimit: state.Size, ReadOnly: readOnly}, n.State, "ext4", unix.MS_NOATIME|unix.MS_NODEV|unix.MS_NOSUID, data); err != nil {
		return n, fmt.Errorf("mounting the state partition of %s: %w", diskPath, err)
	}
	// The root the node runs is the one its ledger names (root A until an
	// upgrade to root B was confirmed by a healthy boot).
	l, err := nodestate.Node{Root: n.State}.ReadLedger()
	if err != nil {
		return n, fmt.Errorf("the node on %s: %w", diskPath, err)
	}
	n.Slot = l.Running().Slot
	if n.Slot == "" {
		n.Slot = manifests.SlotA
	}
	root := n.Layout.Part(rootPart(n.Slot))
	progress(fmt.Sprintf("mounting root %s of %s (%s at %s) read-only", strings.ToUpper(n.Slot), diskPath, FormatSize(root.Size), FormatSize(root.Offset)))
	if _, err := loop.Mount(diskPath, loop.Config{Offset: root.Offset, SizeLimit: root.Size, ReadOnly: true}, n.Root, "squashfs", unix.MS_NODEV, ""); err != nil {
		return n, fmt.Errorf("mounting root %s of %s: %w", strings.ToUpper(n.Slot), diskPath, err)
	}
	for _, d := range []string{filepath.Join(n.State, "var"), filepath.Join(n.Root, "var"), filepath.Join(n.Root, "run")} {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return n, fmt.Errorf("mounting the node on %s: %s is not a directory: %w", diskPath, strings.TrimPrefix(d, n.dir+"/"), ErrNotNodeDisk)
		}
	}
	if err := unix.Mount(filepath.Join(n.State, "var"), filepath.Join(n.Root, "var"), "", unix.MS_BIND, ""); err != nil {
		return n, fmt.Errorf("binding the state's var on the root of %s: %w", diskPath, err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(n.Root, "run"), "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755"); err != nil {
		return n, fmt.Errorf("mounting a tmpfs on the run of %s: %w", diskPath, err)
	}
	return n, nil
}

// openDisk opens the disk read-write and locks it whole (an OFD write
// lock: it conflicts with another strata and with qemu's image locks); a
// block device must be neither mounted nor have a partition mounted.
func openDisk(diskPath string) (*os.File, error) {
	fi, err := os.Stat(diskPath)
	if err != nil {
		return nil, fmt.Errorf("opening disk %s: %w", diskPath, err)
	}
	switch {
	case fi.Mode().IsRegular():
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		if err := checkNotMounted(diskPath, fi); err != nil {
			return nil, fmt.Errorf("opening disk %w", err)
		}
	default:
		return nil, fmt.Errorf("opening disk %s: not a regular file or block device (%s)", diskPath, fi.Mode().Type())
	}
	f, err := os.OpenFile(diskPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening disk %s: %w", diskPath, err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("opening disk %s: another process holds a lock on it (a running VM, another strata): %w", diskPath, ErrInUse)
		}
		return nil, fmt.Errorf("locking disk %s: %w", diskPath, err)
	}
	return f, nil
}

// readLayout reads the disk's GPT: every partition must be where
// Provision puts it, with its type and name.
func readLayout(f *os.File, diskPath string) (*Layout, error) {
	t, err := gpt.Read(f, sectorSize, sectorSize)
	if err != nil {
		return nil, fmt.Errorf("reading the partition table of %s: %v: %w", diskPath, err, ErrNotNodeDisk)
	}
	want := map[int]gpt.Type{PartESP: TypeESP, PartRootA: TypeRootX8664, PartRootB: TypeRootX8664, PartState: TypeLinuxData}
	found := map[int]Partition{}
	for _, p := range t.Partitions {
		if p == nil || p.Type == gpt.Unused {
			continue
		}
		if ty, ok := want[p.Index]; ok && p.Type == ty && p.Name == partNames[p.Index] {
			found[p.Index] = Partition{Index: p.Index, Name: p.Name, Type: string(p.Type), GUID: p.GUID,
				Offset: int64(p.Start) * sectorSize, Size: int64(p.End-p.Start+1) * sectorSize}
		}
	}
	l := &Layout{DiskGUID: t.GUID}
	if end, err := f.Seek(0, io.SeekEnd); err == nil {
		l.Size = end
	}
	for i := PartESP; i <= PartState; i++ {
		p, ok := found[i]
		if !ok {
			return nil, fmt.Errorf("%s has no partition %d %q of type %s: %w", diskPath, i, partNames[i], want[i], ErrNotNodeDisk)
		}
		l.Partitions = append(l.Partitions, p)
	}
	return l, nil
}

// rootPart is the root partition of slot.
func rootPart(slot string) int {
	if slot == manifests.SlotB {
		return PartRootB
	}
	return PartRootA
}

// Close unmounts everything MountNode mounted, innermost first (the
// stacks before the state partition their layers live on, which is
// unmounted cleanly, not lazily), removes the mount points and releases
// the disk. The loop devices go with their mounts.
func (n *Node) Close() error {
	var errs []error
	if n.dir != "" {
		errs = append(errs, unmountBelow(n.dir))
		if len(errs) == 1 && errs[0] == nil {
			errs = append(errs, n.scr.RemoveAll())
		}
		n.scr.Release()
	}
	if n.lock != nil {
		errs = append(errs, n.lock.Close())
		n.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unmounting the node on %s: %w", n.Disk, err)
	}
	return nil
}

// unmountBelow unmounts every mount below dir, a mount without mounts on
// or below it first, until none is left.
func unmountBelow(dir string) error {
	for {
		ms, err := mountinfo.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		hasChild := map[int]bool{}
		for _, m := range ms {
			hasChild[m.Parent] = true
		}
		var leaf *mountinfo.Mount
		for i := range ms {
			if strings.HasPrefix(ms[i].Point, dir+"/") && !hasChild[ms[i].ID] {
				leaf = &ms[i]
			}
		}
		if leaf == nil {
			return nil
		}
		if err := unix.Unmount(leaf.Point, 0); err != nil {
			return fmt.Errorf("unmounting %s: %w", leaf.Point, err)
		}
	}
}
