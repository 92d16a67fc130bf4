package tests

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalAt runs strata with args in dir and sends sig delay after its
// standard error (where progress goes) shows marker; it returns the exit
// status and everything the command printed. The command must reach
// marker.
func signalAt(t *testing.T, dir string, sig syscall.Signal, marker string, delay time.Duration, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(strataBin, args...)
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(log.String(), marker) {
		n, err := stderr.Read(buf)
		log.Write(buf[:n])
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("strata %s ended before %q:\n%s", strings.Join(args, " "), marker, log.String())
		}
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	log.Write(rest)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, log.String()
}

// upgradeRecipe is an image with a kernel and 48 MiB of incompressible
// data: writing it to a root takes long enough to be interrupted.
const upgradeRecipe = `line: up
version: %[1]s
epoch: 1767225600
base:
  dir: rootfs
files:
  - path: /state
    dir: true
  - path: /var
    dir: true
  - path: /run
    dir: true
  - path: /boot/vmlinuz-6.1.0-%[2]d
    content: "kernel\n"
  - path: /boot/initrd.img-6.1.0-%[2]d
    content: "initrd\n"
strata: {}
`

// SIGINT while an offline upgrade writes root B (in the private mount
// namespace strata re-executes itself in) stops it: exit 130 saying
// interrupted, nothing staged, no loop device left on the disk, and the
// same upgrade then succeeds.
func TestInterruptedUpgradeStagesNothing(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	blob := make([]byte, 48<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"1.0.0", "1.1.0"} {
		s.write(fmt.Sprintf("v%d/recipe.yaml", i+1), fmt.Sprintf(upgradeRecipe, v, i+1))
		s.write(fmt.Sprintf("v%d/rootfs/srv/blob", i+1), string(blob))
	}
	s.ok("key", "generate", "--out", "k")
	s.ok("build-image", "v1/recipe.yaml", "--out", "images", "--key", "k.key")
	s.ok("build-image", "v2/recipe.yaml", "--out", "images", "--key", "k.key")
	s.ok("provision", "--image", "images/up-1.0.0.squashfs", "--disk", "node.img", "--node-id", "t")

	code, out := signalAt(t, s.dir, syscall.SIGINT, "to root B", 0, "upgrade", "--disk", "node.img", "--image", "images/up-1.1.0.squashfs")
	if code != 130 || !strings.Contains(out, "interrupted") {
		t.Fatalf("exit %d, want 130 saying interrupted:\n%s", code, out)
	}
	if _, stderr, code := s.run("upgrade", "--disk", "node.img", "--cancel"); code != 3 || !strings.Contains(stderr, "no upgrade is staged") {
		t.Errorf("after the interruption: --cancel exits %d: %s", code, stderr)
	}
	if loops, err := exec.Command("losetup", "-j", s.path("node.img")).CombinedOutput(); err != nil || len(loops) != 0 {
		t.Errorf("loop devices left on the disk (%v): %s", err, loops)
	}
	for _, name := range []string{"images", "."} {
		ents, _ := os.ReadDir(s.path(name))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("left in %s: %s", name, e.Name())
			}
		}
	}
	// Issue 25, item 10: SIGKILL of only the parent while the child
	// writes root B. The kernel signals the child's parent death once for
	// each thread of the parent, and the child took the second SIGTERM as
	// "stop at once", leaving its working directories and a staged layer.
	// Two SIGTERMs at once to the child, and the parent killed: the child
	// still stops cleanly and leaves nothing.
	killedParent(t, s, "upgrade", "--disk", "node.img", "--image", "images/up-1.1.0.squashfs")
	if _, stderr, code := s.run("upgrade", "--disk", "node.img", "--cancel"); code != 3 || !strings.Contains(stderr, "no upgrade is staged") {
		t.Errorf("after the parent was killed: --cancel exits %d: %s", code, stderr)
	}
	out = s.ok("upgrade", "--disk", "node.img", "--image", "images/up-1.1.0.squashfs")
	if !strings.Contains(out, "staged upgrade of node.img: image 1.0.0 -> 1.1.0") {
		t.Errorf("the upgrade after the interruption: %s", out)
	}
}

// killedParent runs strata with args in the session's directory (with a
// $TMPDIR of its own), and once the re-executed child writes root B sends
// it two SIGTERMs and kills the parent; it waits for the child to end and
// requires that it left no working directory.
func killedParent(t *testing.T, s *session, args ...string) {
	t.Helper()
	tmp := t.TempDir()
	cmd := exec.Command(strataBin, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(log.String(), "to root B") {
		n, err := stderr.Read(buf)
		log.Write(buf[:n])
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("strata %s ended before writing root B:\n%s", strings.Join(args, " "), log.String())
		}
	}
	child := childOf(t, cmd.Process.Pid)
	// The second signal after the first was taken (two at once merge
	// into one), as the parent's threads end one after another.
	_ = syscall.Kill(child, syscall.SIGTERM)
	time.Sleep(5 * time.Millisecond)
	_ = syscall.Kill(child, syscall.SIGTERM)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for i := 0; ; i++ {
		if err := syscall.Kill(child, 0); err != nil {
			break // gone (reaped by init once orphaned)
		}
		if i == 1200 {
			t.Fatalf("the child %d did not end within a minute of its parent", child)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		t.Errorf("the child left %s in $TMPDIR", e.Name())
	}
}

// childOf returns the one child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(raw)) {
			var c int
			if _, err := fmt.Sscan(f, &c); err == nil {
				return c
			}
		}
	}
	t.Fatalf("strata %d has no child", pid)
	return 0
}
