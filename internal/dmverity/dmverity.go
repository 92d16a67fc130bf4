package dmverity

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/internal/verity"
)

// Target is what a mapping checks: the data device, which holds its
// hash tree at Params.HashOffset, and the root hash the tree must have.
type Target struct {
	Device string
	Params verity.Params
	Root   []byte
}

// options are veritysetup's options for t's parameters.
func (t Target) options() []string {
	salt := "-" // veritysetup's "no salt"
	if len(t.Params.Salt) > 0 {
		salt = hex.EncodeToString(t.Params.Salt)
	}
	return []string{"--no-superblock", "--hash=" + verity.Algorithm,
		"--data-block-size=" + strconv.Itoa(t.Params.DataBlockSize), "--hash-block-size=" + strconv.Itoa(t.Params.HashBlockSize),
		"--data-blocks=" + strconv.FormatInt(t.Params.DataBlocks, 10), "--hash-offset=" + strconv.FormatInt(t.Params.HashOffset, 10),
		"--salt=" + salt}
}

// OpenArgs is the veritysetup command line that maps t as name.
func (t Target) OpenArgs(name string) []string {
	return append([]string{"open", t.Device, name, t.Device, hex.EncodeToString(t.Root)}, t.options()...)
}

// VerifyArgs is the veritysetup command line that checks t in user
// space.
func (t Target) VerifyArgs() []string {
	return append([]string{"verify", t.Device, t.Device, hex.EncodeToString(t.Root)}, t.options()...)
}

// Available says why this host cannot map dm-verity devices (nil when it
// can): the kernel must have device-mapper and veritysetup must be on
// PATH, with device-mapper loaded (something on the node used it: the
// verified root, udev) and its control node present. The dm-verity
// target itself is loaded on demand.
func Available() error {
	if _, err := os.Stat("/sys/class/misc/device-mapper"); err != nil {
		return fmt.Errorf("the kernel has no device-mapper loaded (no /sys/class/misc/device-mapper)")
	}
	if _, err := os.Stat("/dev/mapper/control"); err != nil {
		return fmt.Errorf("no /dev/mapper/control: %w", err)
	}
	if _, err := exec.LookPath("veritysetup"); err != nil {
		return fmt.Errorf("no veritysetup on PATH (cryptsetup-bin): %w", err)
	}
	return nil
}

// Open maps t as /dev/mapper/name, which it returns. The kernel checks
// each block read from it against t's tree and root hash.
func Open(ctx context.Context, t Target, name string) (string, error) {
	if err := t.Params.Validate(); err != nil {
		return "", fmt.Errorf("mapping %s as %s: %w", t.Device, name, err)
	}
	if name == "" || name[0] == '-' || name[0] == '.' || strings.ContainsAny(name, "/ \t\n") || len(name) > 127 {
		return "", fmt.Errorf("mapping %s: %q is not a device-mapper name", t.Device, name)
	}
	if err := run(ctx, t.OpenArgs(name)); err != nil {
		// veritysetup may have made the device before it failed (or was
		// cancelled): take it away, or it holds the data device.
		_ = run(context.WithoutCancel(ctx), []string{"close", name})
		return "", err
	}
	return filepath.Join("/dev/mapper", name), nil
}

// Verify checks t's data against its tree and root hash in user space
// (`veritysetup verify`), block by block.
func Verify(ctx context.Context, t Target) error {
	if err := t.Params.Validate(); err != nil {
		return fmt.Errorf("verifying %s: %w", t.Device, err)
	}
	return run(ctx, t.VerifyArgs())
}

// Close removes the mapping name. With deferred set, a device still in
// use (mounted) is removed when its last user goes instead of refusing.
func Close(ctx context.Context, name string, deferred bool) error {
	args := []string{"close", name}
	if deferred {
		args = append(args, "--deferred")
	}
	return run(ctx, args)
}

// Prune removes the nodes below /dev/mapper whose names start with
// prefix and that name no device any more: veritysetup makes a device's
// node itself (see run), and nothing removes it after a deferred
// removal.
func Prune(prefix string) error {
	ents, err := os.ReadDir("/dev/mapper")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pruning /dev/mapper: %w", err)
	}
	live := map[string]bool{}
	blocks, _ := filepath.Glob("/sys/block/dm-*/dm/name")
	for _, p := range blocks {
		if raw, err := os.ReadFile(p); err == nil {
			live[strings.TrimSpace(string(raw))] = true
		}
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || live[e.Name()] || e.Type()&os.ModeDevice == 0 {
			continue
		}
		if err := os.Remove(filepath.Join("/dev/mapper", e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("pruning /dev/mapper: %w", err))
		}
	}
	return errors.Join(errs...)
}

// run runs veritysetup with args. libdevmapper makes the device node
// itself instead of waiting for udev, which in an initramfs may lack
// device-mapper's rules.
func run(ctx context.Context, args []string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "veritysetup", args...)
	cmd.Env = append(os.Environ(), "DM_DISABLE_UDEV=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("veritysetup %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
