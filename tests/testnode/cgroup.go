package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// cgroupParent is the directory below this process's own cgroup2 cgroup
// that holds one cgroup per running node.
const cgroupParent = "strata-testnode"

// ownCgroup2 returns the host directory of this process's cgroup in the
// cgroup2 hierarchy (on a hybrid host, below /sys/fs/cgroup/unified).
func ownCgroup2() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("finding the cgroup2 hierarchy: %w", err)
	}
	path := ""
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", errors.New("finding the cgroup2 hierarchy: /proc/self/cgroup has no 0:: line")
	}
	ms, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.FSType != "cgroup2" {
			continue
		}
		rel, err := filepath.Rel(m.Root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		return filepath.Join(m.Point, rel), nil
	}
	return "", errors.New("finding the cgroup2 hierarchy: no cgroup2 mount covers this process's cgroup " + path)
}

// newCgroup creates a fresh cgroup for a node, named PID-NAME-RANDOM
// after this process, and opens it (for CLONE_INTO_CGROUP).
func newCgroup(name string) (string, *os.File, error) {
	own, err := ownCgroup2()
	if err != nil {
		return "", nil, err
	}
	parent := filepath.Join(own, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, fmt.Errorf("creating cgroup %s: %w", parent, err)
	}
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%d-%s-", os.Getpid(), name))
	if err != nil {
		return "", nil, fmt.Errorf("creating a cgroup below %s: %w", parent, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return "", nil, fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return dir, f, nil
}

// cgroupPopulated tells whether any process is left in dir's subtree.
func cgroupPopulated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("reading cgroup %s: %w", dir, err)
	}
	return bytes.Contains(data, []byte("populated 1")), nil
}

// killCgroup kills every process in dir's subtree, waits until it is
// empty and removes it with everything the node's systemd created below
// it.
func killCgroup(ctx context.Context, dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("killing cgroup %s: %w", dir, err)
	}
	for {
		busy, err := cgroupPopulated(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !busy {
			break
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for cgroup %s to empty: %w", dir, err)
		}
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
	slices.Reverse(dirs) // children first
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing cgroup %s: %w", d, err)
		}
	}
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
