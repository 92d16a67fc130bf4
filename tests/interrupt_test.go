package tests

import (
	"bytes"
	"crypto/rand"
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

// SIGINT, SIGTERM and SIGHUP stop a command cleanly: here an apply waiting for
// the node lock another process holds. It says "interrupted", exits 130,
// 143 or 129, and leaves the node as it was; the lock is free afterwards.
func TestInterruptExitsCleanly(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
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

// An interrupted build-image stops inside mksquashfs, says "interrupted",
// exits 130 and leaves no image, no half-written temporary and no staged
// files in --out.
func TestInterruptedBuildLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if o, code := strata("key", "generate", "--out", filepath.Join(dir, "k")); code != 0 {
		t.Fatalf("key generate: %s", o)
	}
	big := make([]byte, 160<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "srv", "blob"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := "line: big\nversion: 1.0.0\ncompressor: xz\nbase:\n  dir: rootfs\n"
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	// A moment after the progress line: inside mksquashfs.
	code, log := signalAt(t, dir, syscall.SIGINT, "writing "+out, 300*time.Millisecond, "build-image", filepath.Join(dir, "recipe.yaml"), "--out", out, "--key", filepath.Join(dir, "k.key"))
	if code != 130 || !strings.Contains(log, "interrupted") {
		t.Fatalf("exit %d, want 130 saying interrupted:\n%s", code, log)
	}
	left, _ := os.ReadDir(out)
	for _, e := range left {
		t.Errorf("left in --out: %s", e.Name())
	}
}

// An interrupted overlay create (compressing a large file) exits 130,
// leaves the repository as it was, no temporary file in overlays/, and
// its lock free: the next create succeeds.
func TestInterruptedCreateLeavesRepository(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		if o, code := strata(args...); code != 0 {
			t.Fatalf("strata %v: exit %d:\n%s", args, code, o)
		}
	}
	run("key", "generate", "--out", filepath.Join(dir, "k"))
	key := filepath.Join(dir, "k.key")
	run("build-image", filepath.Join(demoDir, "recipe.yaml"), "--out", filepath.Join(dir, "images"), "--key", key)
	repoDir := filepath.Join(dir, "repo")
	run("repo", "init", repoDir, "--image", filepath.Join(dir, "images", "demo-1.0.0.squashfs"), "--key", key)
	index, err := os.ReadFile(filepath.Join(repoDir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Random data xz compresses at a few MB/s: seconds of work that a
	// signal must cut short.
	big := make([]byte, 48<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(dir, "blob")
	if err := os.WriteFile(blob, big, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strataBin, "overlay", "create", "--repo", repoDir, "--version", "1.0.1", "--key", key,
		"--add", "/opt/blob="+blob, "--compression", "xz")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Signal once the archive is being written.
	for i := 0; i < 600; i++ {
		if ents, _ := os.ReadDir(filepath.Join(repoDir, "overlays")); len(ents) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 143 || !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("exit %d, want 143 saying interrupted:\n%s", code, out.String())
	}
	if now, _ := os.ReadFile(filepath.Join(repoDir, "index.json")); string(now) != string(index) {
		t.Error("the interrupted create changed the index")
	}
	if ents, _ := os.ReadDir(filepath.Join(repoDir, "overlays")); len(ents) != 0 {
		t.Errorf("left in overlays/: %v", ents)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("small\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("overlay", "create", "--repo", repoDir, "--version", "1.0.1", "--key", key, "--add", "/opt/small="+small)
}
