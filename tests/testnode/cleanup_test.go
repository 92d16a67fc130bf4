//go:build debian

package testnode_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/tests/testnode"
)

// The helper test's settings, from the parent test.
const (
	helperMode  = "STRATA_TESTNODE_HELPER"       // "fatal" or "interrupt"
	helperImage = "STRATA_TESTNODE_HELPER_IMAGE" // the image to boot
	helperState = "STRATA_TESTNODE_HELPER_STATE" // its state directory
)

// TestHelperNode is not a test on its own: the cleanup tests run the test
// binary again with only this test and helperMode set. It starts a node,
// prints what the parent needs to check, then fails (t.Fatal, "fatal") or
// waits to be interrupted ("interrupt"). Without helperMode it does
// nothing.
func TestHelperNode(t *testing.T) {
	mode := os.Getenv(helperMode)
	if mode == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	n := startNode(ctx, t, testnode.Config{Name: "helper-" + mode, Image: os.Getenv(helperImage), State: os.Getenv(helperState)})
	execOK(ctx, t, n, "touch", "/var/lib/helper-was-here")
	fmt.Printf("NODE %d %s %s %s\n", n.PID(), n.LoopDevice(), n.Cgroup(), n.MountedRoot())
	if mode == "fatal" {
		t.Fatal("the helper fails on purpose")
	}
	<-ctx.Done()
	t.Fatal("the helper was not interrupted")
}

// helperNode is what the helper printed about its node.
type helperNode struct {
	pid                int
	loop, cgroup, root string
}

// runHelper runs TestHelperNode in a new test binary process, returns its
// node once it runs, and a function that waits for the process and
// returns its output.
func runHelper(ctx context.Context, t *testing.T, mode string) (*exec.Cmd, helperNode, func() (string, error)) {
	t.Helper()
	img := debianImage(t)
	state := filepath.Join(t.TempDir(), "state")
	if err := testnode.SeedState(ctx, img, state); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperNode$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperMode+"="+mode, helperImage+"="+img, helperState+"="+state)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var node helperNode
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "NODE" {
			node.pid, _ = strconv.Atoi(f[1])
			node.loop, node.cgroup, node.root = f[2], f[3], f[4]
			break
		}
	}
	if node.pid == 0 {
		_ = cmd.Wait()
		t.Fatalf("the helper printed no node:\n%s", out.String())
	}
	wait := func() (string, error) {
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
		err := cmd.Wait()
		return out.String(), err
	}
	if _, err := os.Stat(filepath.Join(state, "var/lib/helper-was-here")); err != nil {
		t.Errorf("the helper's node did not write to its state: %v", err)
	}
	return cmd, node, wait
}

// TestCleanupAfterFatal: a test that fails with t.Fatal while its node
// runs leaves no process, mount, loop device or cgroup behind.
func TestCleanupAfterFatal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	cmd, node, wait := runHelper(ctx, t, "fatal")
	out, err := wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "the helper fails on purpose") || !strings.Contains(out, "--- FAIL: TestHelperNode") {
		t.Fatalf("the helper: %v, want exit status 1 and its t.Fatal message:\n%s", err, out)
	}
	checkGone(t, node, cmd.Process.Pid)
}

// TestCleanupAfterInterrupt: SIGINT to a test binary while its node runs
// (no cleanup runs) still takes the node down: its launcher dies with
// its parent (Pdeathsig), and the PID namespace, mounts and loop device
// with it. Only the empty cgroup directory stays; it is removed here.
func TestCleanupAfterInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	cmd, node, wait := runHelper(ctx, t, "interrupt")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	out, err := wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || (!ws.Signaled() && ws.ExitStatus() == 0) {
		t.Errorf("the interrupted helper: %v, want it killed or failed\n%s", err, out)
	}
	// The kernel tears the namespace down after the parent is gone
	// (under the load of make test, with live nodes booting beside it,
	// that has taken longer than 30 seconds: the wait bounds a hang, it
	// does not time the teardown).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		data, err := os.ReadFile(filepath.Join(node.cgroup, "cgroup.events"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes remain in %s after the helper was interrupted", node.cgroup)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := removeCgroup(node.cgroup); err != nil {
		t.Error(err)
	}
	checkGone(t, node, cmd.Process.Pid)
	// and its work directory (checkGone found no mount below it).
	if err := os.RemoveAll(filepath.Dir(node.root)); err != nil {
		t.Error(err)
	}
}

// checkGone checks that a node of another process is gone: its PID, its
// loop device, its mounts and its cgroup.
func checkGone(t *testing.T, node helperNode, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := errors.Join(processGone(node.pid), loopFree(node.loop, filepath.Dir(node.root)))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(node.cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s is still there: %v", node.cgroup, err)
	}
	requireNoLeaks(t, debianImage(t), pid)
}

// processGone returns an error while pid exists.
func processGone(pid int) error {
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("process %d still exists (kill 0: %v)", pid, err)
	}
	return nil
}

// loopFree returns an error while loop is backed by a file below work.
func loopFree(loop, work string) error {
	data, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loop), "loop/backing_file"))
	if err == nil && strings.HasPrefix(string(data), work+"/") {
		return fmt.Errorf("%s still holds %s", loop, strings.TrimSpace(string(data)))
	}
	return nil
}

// requireNoLeaks fails t when losetup -a lists the image or a work file
// of a node of this test binary or of the processes pids, or a host
// mount of them remains.
func requireNoLeaks(t *testing.T, img string, pids ...int) {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v\n%s", err, out)
	}
	ours := []string{img}
	for _, pid := range append(pids, os.Getpid()) {
		ours = append(ours, fmt.Sprintf("%s/%s%d-", os.TempDir(), testnode.WorkPrefix, pid))
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ours {
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, s) {
				t.Errorf("losetup -a still lists %s", strings.TrimSpace(line))
			}
		}
		for line := range strings.Lines(string(mi)) {
			if strings.Contains(line, s) {
				t.Errorf("host mount left: %s", strings.TrimSpace(line))
			}
		}
	}
}

// removeCgroup removes a cgroup directory and its (empty) children.
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		err = errors.Join(err, os.Remove(dirs[i]))
	}
	return err
}
