package systemd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/aptsources"
	"github.com/strata-dev/strata/internal/testenv"
)

// This file boots a real systemd as PID 1 of a pid+mount namespace (see
// /work/shared/TESTBED.md) on an overlay of a cached Debian root, for
// TestSystemdNode. It is private and small on purpose; tests/testnode is
// the general harness.

// nodeCache is where a root is built when no cached one is found.
const nodeCache = "/var/cache/strata-test/resolver-root"

// bootScript runs inside `unshare -fpm --mount-proc`: $1 is the read-only
// lower root, $2 an empty directory for the overlay. All mounts live and
// die with the namespace.
const bootScript = `set -e
mount --make-rprivate /
mount -t tmpfs tmpfs "$2"
mkdir "$2/up" "$2/work" "$2/root"
mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/up,workdir=$2/work" "$2/root"
mount -t proc proc "$2/root/proc"
mount --rbind /sys "$2/root/sys"
mount --rbind /dev "$2/root/dev"
mount -t tmpfs tmpfs "$2/root/run"
mount -t tmpfs tmpfs "$2/root/tmp"
export container=other
exec chroot "$2/root" /lib/systemd/systemd --system
`

// nodeRoot finds a Debian root with systemd and rsyslog: $STRATA_TEST_SYSTEMD_ROOT,
// the resolver cache, or a tree another test cached under
// /var/cache/strata-test; failing those it builds the resolver cache with
// debootstrap (about 75 s).
func nodeRoot(t *testing.T) string {
	t.Helper()
	usable := func(dir string) bool {
		for _, p := range []string{"lib/systemd/systemd", "bin/systemctl", "lib/systemd/system/rsyslog.service", "etc/systemd/system/syslog.service"} {
			if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("STRATA_TEST_SYSTEMD_ROOT"); dir != "" {
		if !usable(dir) {
			t.Fatalf("STRATA_TEST_SYSTEMD_ROOT=%s lacks systemd or rsyslog", dir)
		}
		return dir
	}
	cands := []string{nodeCache}
	more, _ := filepath.Glob("/var/cache/strata-test/*/*")
	cands = append(cands, more...)
	for _, dir := range cands {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() && usable(dir) {
			return dir
		}
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("no cached Debian root with systemd under /var/cache/strata-test and no debootstrap to build %s: install debootstrap or set STRATA_TEST_SYSTEMD_ROOT", nodeCache)
	}
	tmp := nodeCache + ".tmp"
	os.RemoveAll(tmp)
	t.Logf("building %s with debootstrap", nodeCache)
	mirror, err := aptsources.Mirror(aptsources.Dir, "bookworm")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus,rsyslog", "bookworm", tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, nodeCache); err != nil {
		t.Fatal(err)
	}
	return nodeCache
}

// bootNode starts systemd on an overlay of root and returns a Systemctl
// that drives it through nsenter, and a function running a command in the
// node. t.Cleanup kills the namespace.
func bootNode(t *testing.T, root string) (*Systemctl, func(args ...string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("TestSystemdNode needs root (namespaces and mounts)")
	}
	testenv.RequireTools(t, []string{"unshare", "nsenter", "chroot"})
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "systemd.log"))
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "node")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-fpm", "--mount-proc", "sh", "-c", bootScript, "sh", root, mnt)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	t.Cleanup(func() {
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL) // the namespace's PID 1: the kernel kills the rest
		}
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("systemd output:\n%s", b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children")
		if f := strings.Fields(string(b)); len(f) > 0 {
			if comm, _ := os.ReadFile("/proc/" + f[0] + "/comm"); strings.TrimSpace(string(comm)) == "systemd" {
				pid, _ = strconv.Atoi(f[0])
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("systemd did not start")
	}
	enter := []string{"nsenter", "-t", strconv.Itoa(pid), "-m", "-p", "-r", "-w", "--"}
	s := NewSystemctl(WithCommand(append(enter, "systemctl")...))
	inNode := func(args ...string) {
		t.Helper()
		argv := append(append([]string(nil), enter...), args...)
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	state := ""
	for time.Now().Before(deadline.Add(30 * time.Second)) {
		out, _ := s.output(context.Background(), "is-system-running")
		if state = strings.TrimSpace(out); state == "running" || state == "degraded" {
			return s, inNode
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("systemd did not come up: state %q", state)
	return nil, nil
}
