package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// catches reports whether process pid has a handler installed for sig
// (/proc/PID/status SigCgt), so a test signals it only once it listens.
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// SIGINT and SIGTERM stop a command cleanly: here an apply waiting for
// the node lock another process holds. It says "interrupted", exits 130
// or 143, and leaves the node as it was; the lock is free afterwards.
func TestInterruptExitsCleanly(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		c := newHCase(t)
		lock, err := os.OpenFile(filepath.Join(c.root, manifests.StateDir, "lock"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		before := digestTree(t, c.root)
		cmd := exec.Command(strataBin, c.apply("--lock-wait", "10m", c.b.ov1)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 600 && !catches(cmd.Process.Pid, sig); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // let it reach the lock wait
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		lock.Close()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if want := 128 + int(sig); code != want || !strings.Contains(out.String(), "interrupted") {
			t.Errorf("%s: exit %d, want %d saying interrupted:\n%s", sig, code, want, out.String())
		}
		if digestTree(t, c.root) != before {
			t.Errorf("%s: the interrupted apply changed the node", sig)
		}
		if o, code := strata(c.apply(c.b.ov1)...); code != 0 {
			t.Errorf("%s: apply after the interruption: exit %d:\n%s", sig, code, o)
		}
	}
}
