package testnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var sweepOnce sync.Once

// sweepStale removes what test binaries that were killed (so their
// cleanups never ran) left behind: work directories in os.TempDir() and
// cgroups named after a PID that no longer exists. Their nodes died with
// them (Pdeathsig); only these directories stay. It runs once per
// process, best effort.
func sweepStale() {
	sweepOnce.Do(func() {
		ms, err := readMountinfo("/proc/self/mountinfo")
		if err != nil {
			return
		}
		works, _ := filepath.Glob(filepath.Join(os.TempDir(), WorkPrefix+"*"))
		for _, w := range works {
			if !deadOwner(strings.TrimPrefix(filepath.Base(w), WorkPrefix)) {
				continue
			}
			mounted := false
			for _, m := range ms {
				mounted = mounted || m.Point == w || strings.HasPrefix(m.Point, w+"/")
			}
			if !mounted {
				_ = os.RemoveAll(w)
			}
		}
		own, err := ownCgroup2()
		if err != nil {
			return
		}
		cgs, _ := filepath.Glob(filepath.Join(own, cgroupParent, "*"))
		for _, cg := range cgs {
			if fi, err := os.Stat(cg); err != nil || !fi.IsDir() || !deadOwner(filepath.Base(cg)) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = killCgroup(ctx, cg)
			cancel()
		}
	})
}

// deadOwner tells whether name starts with "PID-" of a process that does
// not exist.
func deadOwner(name string) bool {
	p, _, ok := strings.Cut(name, "-")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
