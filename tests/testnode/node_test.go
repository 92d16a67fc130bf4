//go:build debian

package testnode_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/tests/testnode"
)

// bootTimeout bounds a node's start and boot; a node normally runs in a
// few seconds.
const bootTimeout = 2 * time.Minute

// debianImage returns the squashfs built once per test binary.
func debianImage(t *testing.T) string {
	t.Helper()
	img, err := testnode.DebianImage(t)
	if err != nil {
		t.Fatal(err)
	}
	return img.Squashfs
}

// startNode seeds a state directory, starts a node and waits until its
// systemd has booted.
func startNode(ctx context.Context, t *testing.T, cfg testnode.Config) *testnode.Node {
	t.Helper()
	if cfg.Image == "" {
		cfg.Image = debianImage(t)
	}
	if cfg.State == "" {
		cfg.State = filepath.Join(t.TempDir(), "state")
		if err := testnode.SeedState(ctx, cfg.Image, cfg.State); err != nil {
			t.Fatal(err)
		}
	}
	n, err := testnode.Start(ctx, t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// execOK runs argv in the node and fails t on an error.
func execOK(ctx context.Context, t *testing.T, n *testnode.Node, argv ...string) string {
	t.Helper()
	out, _, err := n.Exec(ctx, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// unitOK returns a unit's state and fails t on an error.
func unitOK(ctx context.Context, t *testing.T, n *testnode.Node, name string) testnode.UnitState {
	t.Helper()
	u, err := n.Unit(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// unitsOK snapshots the node's services and fails t on an error.
func unitsOK(ctx context.Context, t *testing.T, n *testnode.Node) map[string]testnode.UnitState {
	t.Helper()
	us, err := n.Units(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return us
}

// requireRunning fails t unless the unit is active/running with a main
// process.
func requireRunning(ctx context.Context, t *testing.T, n *testnode.Node, name string) testnode.UnitState {
	t.Helper()
	u := unitOK(ctx, t, n, name)
	if u.ActiveState != "active" || u.SubState != "running" || u.MainPID <= 1 || u.InvocationID == "" {
		t.Fatalf("node %s: %s = %+v, want active/running with a main PID", n.Name(), name, u)
	}
	return u
}

// httpGet is a fixed bash script (no data goes into the shell): a GET of
// nginx's default page over loopback with bash's /dev/tcp (the image has
// no HTTP client).
const httpGet = `exec 3<>/dev/tcp/127.0.0.1/80 && printf 'GET / HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3`

// TestNodeServices boots a node and checks its layout and services: nginx
// and rsyslog run, nginx answers on the node's loopback, the hostname is
// the node's, the root is read-only and /var is the state directory.
func TestNodeServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	state := filepath.Join(t.TempDir(), "state")
	if err := testnode.SeedState(ctx, debianImage(t), state); err != nil {
		t.Fatal(err)
	}
	n := startNode(ctx, t, testnode.Config{Name: "svc", State: state, Env: []string{"TESTNODE_MARK=svc-env"},
		Activate: []string{"mkdir", "{root}/run/activated"}})

	requireRunning(ctx, t, n, "nginx.service")
	requireRunning(ctx, t, n, "rsyslog.service")
	resp := execOK(ctx, t, n, "bash", "-c", httpGet)
	if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") || !strings.Contains(resp, "Welcome to nginx!") {
		t.Errorf("GET / from nginx inside the node:\n%.300s", resp)
	}
	if h := strings.TrimSpace(execOK(ctx, t, n, "hostname")); h != "svc" {
		t.Errorf("hostname inside the node = %q, want svc", h)
	}
	if pid1 := strings.TrimSpace(execOK(ctx, t, n, "cat", "/proc/1/comm")); pid1 != "systemd" {
		t.Errorf("PID 1 inside the node is %q, want systemd", pid1)
	}
	env := strings.Split(execOK(ctx, t, n, "cat", "/proc/1/environ"), "\x00")
	if !slices.Contains(env, "container=other") || !slices.Contains(env, "TESTNODE_MARK=svc-env") {
		t.Errorf("systemd's environment %q lacks container=other or Config.Env", env)
	}
	if _, errOut, err := n.Exec(ctx, "touch", "/usr/testnode-write"); err == nil || !bytes.Contains(errOut, []byte("Read-only file system")) {
		t.Errorf("writing below /usr inside the node: %v %s, want a read-only file system", err, errOut)
	}
	// /var is state/var: a file written inside is in the state directory.
	execOK(ctx, t, n, "touch", "/var/lib/testnode-written")
	if _, err := os.Stat(filepath.Join(state, "var/lib/testnode-written")); err != nil {
		t.Errorf("a file written to /var inside the node is not in the state directory: %v", err)
	}
	// The activation ran in the node's mount namespace before systemd.
	if _, err := os.Stat(filepath.Join(n.Root(), "run/activated")); err != nil {
		t.Errorf("the activation's marker is missing: %v", err)
	}
	// The host reads the node's files through Root.
	if b, err := os.ReadFile(filepath.Join(n.Root(), "etc/hostname")); err != nil || string(b) != "debian-node\n" {
		t.Errorf("reading etc/hostname through %s: %q %v", n.Root(), b, err)
	}
	// debian-node has /state, as a disk node does: the state directory is
	// bound there, and its var is /var.
	if !n.StateMounted() {
		t.Errorf("state is not mounted at /state, but debian-node has a /state directory")
	}
	execOK(ctx, t, n, "test", "-e", "/state/var/lib/testnode-written")
}

// TestReloadRestart checks a reload (same main process, nothing changed)
// and a restart (only the restarted unit changed) with Units and Changed.
func TestReloadRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	n := startNode(ctx, t, testnode.Config{Name: "reload"})

	before := unitsOK(ctx, t, n)
	for _, u := range []string{"nginx.service", "rsyslog.service", "dbus.service", "systemd-journald.service"} {
		if before[u].ActiveState != "active" {
			t.Errorf("snapshot: %s = %+v, want active", u, before[u])
		}
	}
	execOK(ctx, t, n, "systemctl", "reload", "nginx.service")
	reloaded := unitsOK(ctx, t, n)
	if ch := testnode.Changes(before, reloaded); len(ch) != 0 {
		t.Errorf("after reloading nginx, changed: %v, want nothing", ch)
	}
	if a, b := before["nginx.service"], reloaded["nginx.service"]; a.MainPID != b.MainPID || a.InvocationID != b.InvocationID {
		t.Errorf("reload changed nginx: %+v -> %+v", a, b)
	}

	execOK(ctx, t, n, "systemctl", "restart", "rsyslog.service")
	restarted := unitsOK(ctx, t, n)
	if got := testnode.Changed(reloaded, restarted); !slices.Equal(got, []string{"rsyslog.service"}) {
		t.Errorf("after restarting rsyslog, changed: %v, want [rsyslog.service]", testnode.Changes(reloaded, restarted))
	}
	a, b := reloaded["rsyslog.service"], restarted["rsyslog.service"]
	if a.MainPID == b.MainPID || a.InvocationID == b.InvocationID || b.ActiveState != "active" || b.MainPID <= 1 {
		t.Errorf("restart of rsyslog: %+v -> %+v, want a new main PID and invocation, active", a, b)
	}
}

// TestReboot reboots a node: new invocations, a new activation, and what
// was written to /var survives.
func TestReboot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	n := startNode(ctx, t, testnode.Config{Name: "reboot", Activate: []string{"mkdir", "{root}/run/activated"}})
	// A fixed script: a random marker written below /var, printed.
	marker := strings.TrimSpace(execOK(ctx, t, n, "bash", "-c",
		`m=$(cat /proc/sys/kernel/random/uuid) && echo "$m" > /var/lib/testnode-marker && sync && echo "$m"`))
	if len(marker) != 36 {
		t.Fatalf("marker %q", marker)
	}
	before := unitsOK(ctx, t, n)
	pid := n.PID()

	start := time.Now()
	if err := n.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("reboot: running again after %v", time.Since(start).Round(time.Millisecond))
	if n.PID() == pid {
		t.Errorf("PID %d is the same after the reboot", pid)
	}
	if err := processGone(pid); err != nil {
		t.Error(err)
	}
	after := unitsOK(ctx, t, n)
	for _, u := range []string{"nginx.service", "rsyslog.service", "dbus.service"} {
		if before[u].InvocationID == after[u].InvocationID || after[u].ActiveState != "active" {
			t.Errorf("%s across the reboot: %+v -> %+v, want a new invocation, active", u, before[u], after[u])
		}
	}
	if got := strings.TrimSpace(execOK(ctx, t, n, "cat", "/var/lib/testnode-marker")); got != marker {
		t.Errorf("/var/lib/testnode-marker after the reboot = %q, want %q", got, marker)
	}
	if _, err := os.Stat(filepath.Join(n.Root(), "run/activated")); err != nil {
		t.Errorf("the activation did not run again (fresh /run has no marker): %v", err)
	}
}

// TestActivationFails checks that a failing activation aborts the start
// with its output and leaves nothing behind.
func TestActivationFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	img := debianImage(t)
	state := filepath.Join(t.TempDir(), "state")
	if err := testnode.SeedState(ctx, img, state); err != nil {
		t.Fatal(err)
	}
	n, err := testnode.Start(ctx, t, testnode.Config{Name: "badactivate", Image: img, State: state,
		Activate: []string{"ls", "{root}/no-such-activation-input"}})
	if err == nil {
		t.Fatalf("Start with a failing activation succeeded (pid %d)", n.PID())
	}
	if !strings.Contains(err.Error(), "no-such-activation-input") || !strings.Contains(err.Error(), "No such file") {
		t.Errorf("error %q does not carry the activation's output", err)
	}
	requireNoLeaks(t, img)
}

// TestTwoNodes runs two nodes at once: their own hostnames, services,
// networks and cgroups; restarting a service on one and stopping it leave
// the other alone.
func TestTwoNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	img := debianImage(t)
	var nodes []*testnode.Node
	for _, name := range []string{"alpha", "beta"} {
		state := filepath.Join(t.TempDir(), "state")
		if err := testnode.SeedState(ctx, img, state); err != nil {
			t.Fatal(err)
		}
		n, err := testnode.Start(ctx, t, testnode.Config{Name: name, Image: img, State: state})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	a, b := nodes[0], nodes[1]
	for _, n := range nodes {
		if err := n.WaitRunning(ctx); err != nil {
			t.Fatal(err)
		}
		if h := strings.TrimSpace(execOK(ctx, t, n, "hostname")); h != n.Name() {
			t.Errorf("hostname on %s = %q", n.Name(), h)
		}
		requireRunning(ctx, t, n, "nginx.service") // both listen on port 80: separate networks
		if resp := execOK(ctx, t, n, "bash", "-c", httpGet); !strings.HasPrefix(resp, "HTTP/1.1 200 OK") {
			t.Errorf("GET on %s: %.200s", n.Name(), resp)
		}
	}
	if a.LoopDevice() == b.LoopDevice() || a.Cgroup() == b.Cgroup() {
		t.Errorf("nodes share a loop device or cgroup: %s %s, %s %s", a.LoopDevice(), b.LoopDevice(), a.Cgroup(), b.Cgroup())
	}
	aBefore, bBefore := unitsOK(ctx, t, a), unitsOK(ctx, t, b)
	execOK(ctx, t, a, "systemctl", "restart", "rsyslog.service", "nginx.service")
	if got := testnode.Changed(aBefore, unitsOK(ctx, t, a)); !slices.Equal(got, []string{"nginx.service", "rsyslog.service"}) {
		t.Errorf("changed on alpha after restarting two services: %v", got)
	}
	if ch := testnode.Changes(bBefore, unitsOK(ctx, t, b)); len(ch) != 0 {
		t.Errorf("restarting services on alpha changed beta: %v", ch)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if ch := testnode.Changes(bBefore, unitsOK(ctx, t, b)); len(ch) != 0 {
		t.Errorf("stopping alpha changed beta: %v", ch)
	}
	if out, _, _ := b.Exec(ctx, "systemctl", "is-system-running"); strings.TrimSpace(string(out)) != "running" {
		s := string(out)
		t.Errorf("beta is %s after alpha stopped", s)
	}
}
