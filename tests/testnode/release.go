package testnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// waitReleased waits until a stopped boot has let go of its loop device
// (autoclear detaches it once the node's mount namespace is gone) and
// checks that no mount of it or below its root is visible on the host.
// backing is the file the loop device was set up with.
func waitReleased(ctx context.Context, loop, backing, root string) error {
	for {
		held, err := loopBacking(loop)
		if err != nil {
			return err
		}
		if held == "" || held != backing {
			break
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("loop device %s still holds %s: %w", loop, backing, err)
		}
	}
	ms, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, m := range ms {
		if (loop != "" && m.Source == loop) || m.Point == root || strings.HasPrefix(m.Point, root+"/") {
			return fmt.Errorf("host mount %s on %s left behind", m.Source, m.Point)
		}
	}
	return nil
}

// loopBacking returns the backing file of a loop device (/dev/loopN), or
// "" when it has none.
func loopBacking(loop string) (string, error) {
	if loop == "" {
		return "", nil
	}
	p := filepath.Join("/sys/block", filepath.Base(loop), "loop/backing_file")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)"), nil
}
