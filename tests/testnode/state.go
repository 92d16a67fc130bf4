package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// SeedState makes stateDir a state directory for nodes of image: when
// stateDir/var does not exist it fills it with the image's /var (owners,
// modes and times preserved, via unsquashfs as root), because the image's
// services need their /var content. An existing stateDir/var is left
// alone, so callers can provision state themselves (for example with
// strata provision) and still call SeedState.
func SeedState(ctx context.Context, image, stateDir string) error {
	dst := filepath.Join(stateDir, "var")
	if _, err := os.Lstat(dst); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("testnode: seeding state %s: %w", stateDir, err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fmt.Errorf("testnode: seeding state %s: %w", stateDir, err)
	}
	tmp, err := os.MkdirTemp(stateDir, ".seed-")
	if err != nil {
		return fmt.Errorf("testnode: seeding state %s: %w", stateDir, err)
	}
	defer os.RemoveAll(tmp)
	ex := filepath.Join(tmp, "x") // unsquashfs creates it
	cmd := exec.CommandContext(ctx, "unsquashfs", "-no-progress", "-d", ex, image, "/var")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testnode: seeding state %s: unsquashfs %s /var: %w\n%s", stateDir, image, err, out.Bytes())
	}
	if err := os.Rename(filepath.Join(ex, "var"), dst); err != nil {
		return fmt.Errorf("testnode: seeding state %s: image %s has no /var? %w", stateDir, image, err)
	}
	return nil
}
