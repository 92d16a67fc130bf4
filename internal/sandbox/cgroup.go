package sandbox

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the control group file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroup is the control group a sandbox's processes run in, so that
// their memory is bounded together, whatever holds it (anonymous memory,
// page cache, tmpfs and memfd pages, pipe buffers: what the address-space
// limit does not count), and so is their number. On the unified
// hierarchy (cgroup v2) it is one directory; on the legacy one (v1), one
// in the memory and one in the pids hierarchy.
type cgroup struct {
	dirs   []string // every directory made, to remove
	memory string   // the directory whose memory controller bounds it
	v2     bool
}

// newCgroup makes a control group bounding memory (bytes, swap included)
// and processes. It returns nil, and no error, where none can be made
// (no controller, or a cgroup file system this process may not write: a
// container's): the command then runs bounded by its resource limits
// alone.
func newCgroup(memory int64, procs int) (*cgroup, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil
	}
	name := "strata-sandbox-" + randomName()
	var c *cgroup
	if _, err = os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		c, err = newCgroup2(own, name, memory, procs)
	} else {
		c, err = newCgroup1(own, name, memory, procs)
	}
	if c != nil {
		madeCgroup(c.dirs)
	}
	return c, err
}

// madeCgroup is told the directories of every group newCgroup makes (a
// test checks that exactly those are gone after).
var madeCgroup = func([]string) {}

// newCgroup2 makes the group on the unified hierarchy: below this
// process's own group where that delegates memory and pids to its
// children, else below the root (a group that holds processes cannot
// enable controllers for its children).
func newCgroup2(own []byte, name string, memory int64, procs int) (*cgroup, error) {
	var parents []string
	if p, ok := cgroupPath(own, ""); ok {
		parents = append(parents, p)
	}
	parents = append(parents, "/")
	for _, p := range parents {
		dir := filepath.Join(cgroupRoot, p, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		c := &cgroup{dirs: []string{dir}, memory: dir, v2: true}
		if !exists(dir, "memory.max") || !exists(dir, "pids.max") {
			c.close()
			continue
		}
		for _, w := range [][2]string{{"memory.max", itoa(memory)}, {"memory.swap.max", "0"}, {"pids.max", strconv.Itoa(procs)}} {
			if w[0] == "memory.swap.max" && !exists(dir, w[0]) {
				continue // no swap accounting: no swap to bound
			}
			if err := write(dir, w[0], w[1]); err != nil {
				c.close()
				return nil, err
			}
		}
		return c, nil
	}
	return nil, nil
}

// newCgroup1 makes the group on the legacy hierarchies, below this
// process's own group in each.
func newCgroup1(own []byte, name string, memory int64, procs int) (*cgroup, error) {
	c := &cgroup{}
	for _, ctl := range []string{"memory", "pids"} {
		p, ok := cgroupPath(own, ctl)
		if !ok || !exists(filepath.Join(cgroupRoot, ctl), "cgroup.procs") {
			c.close()
			return nil, nil
		}
		dir := filepath.Join(cgroupRoot, ctl, p, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.close()
			return nil, nil
		}
		c.dirs = append(c.dirs, dir)
		var ws [][2]string
		if ctl == "memory" {
			c.memory = dir
			// memsw (memory and swap together) only after the memory
			// limit, which it may not be below.
			ws = [][2]string{{"memory.limit_in_bytes", itoa(memory)}, {"memory.memsw.limit_in_bytes", itoa(memory)}}
		} else {
			ws = [][2]string{{"pids.max", strconv.Itoa(procs)}}
		}
		for _, w := range ws {
			if w[0] == "memory.memsw.limit_in_bytes" && !exists(dir, w[0]) {
				continue
			}
			if err := write(dir, w[0], w[1]); err != nil {
				c.close()
				return nil, err
			}
		}
	}
	return c, nil
}

// add moves the process pid (the sandbox's first, before it has started
// anything) into the group; its descendants follow.
func (c *cgroup) add(pid int) error {
	if c == nil {
		return nil
	}
	for _, d := range c.dirs {
		if err := write(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// oomKilled reports whether the kernel killed a process of the group for
// want of memory.
func (c *cgroup) oomKilled() bool {
	if c == nil || c.memory == "" {
		return false
	}
	file := "memory.oom_control" // v1: "oom_kill N" (Linux 4.13 and later)
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.memory, file))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n > 0
		}
	}
	return false
}

// close kills what is left in the group (v2) and removes its directories,
// waiting a little for the processes of the sandbox's PID namespace, all
// killed with its first, to be gone.
func (c *cgroup) close() {
	if c == nil {
		return
	}
	if c.v2 && len(c.dirs) > 0 && exists(c.dirs[0], "cgroup.kill") {
		_ = write(c.dirs[0], "cgroup.kill", "1")
	}
	for i := len(c.dirs) - 1; i >= 0; i-- {
		for try := 0; try < 200; try++ {
			err := unix.Rmdir(c.dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.dirs = nil
}

// cgroupPath returns this process's group in the hierarchy of the
// controller ctl ("" for the unified one) from /proc/self/cgroup.
func cgroupPath(own []byte, ctl string) (string, bool) {
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if ctl == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], true
		}
		for _, c := range strings.Split(parts[1], ",") {
			if ctl != "" && c == ctl {
				return parts[2], true
			}
		}
	}
	return "", false
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func write(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0); err != nil {
		return fmt.Errorf("%w: control group %s: %w", ErrSandbox, dir, err)
	}
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
