//go:build debian

package live_test

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
)

// peer compares strata's resolved plan for the overlay file with what
// Debian's needrestart finds after the change is live: the overlay is
// planned with --dry-run, applied with restarts left pending, needrestart
// -b -r l lists the services whose processes map replaced files, and then
// restart-pending carries out strata's plan. It returns the resolution
// and needrestart's list.
func peer(t *testing.T, l *lab, file string) (*systemd.Resolved, []string) {
	t.Helper()
	out, errOut, code := l.strata("apply-overlay", "--root", "/", "--dry-run", "--json", file)
	if code != 0 {
		t.Fatalf("dry run exited %d:\n%s", code, errOut)
	}
	var rep node.ApplyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Plans) != 1 || rep.Plans[0].Live == nil {
		t.Fatalf("the dry run on a live node shows no resolved plan: %s", out)
	}
	res := rep.Plans[0].Live
	if _, errOut, code := l.strata("apply-overlay", "--root", "/", "--restart-with", "none", file); code != 0 {
		t.Fatalf("apply with restarts pending exited %d:\n%s", code, errOut)
	}
	nr := l.sh("needrestart -b -r l 2>/dev/null || true")
	var listed []string
	for _, line := range strings.Split(nr, "\n") {
		if svc, ok := strings.CutPrefix(line, "NEEDRESTART-SVC: "); ok {
			listed = append(listed, strings.TrimSpace(svc))
		}
	}
	sort.Strings(listed)
	t.Logf("needrestart -b -r l:\n%s", nr)
	return res, listed
}

// mapping lists the units (from /proc/PID/cgroup) of the processes that
// map a file whose path ends in base: needrestart's own method, which
// needrestart itself cannot apply on a layered node (see docs).
func mapping(t *testing.T, l *lab, base string) []string {
	t.Helper()
	out := l.sh(`for p in /proc/[0-9]*; do if grep -q '/` + base + `$' $p/maps 2>/dev/null; then sed -n 's|^0::/||p' $p/cgroup; fi; done | sort -u`)
	var units []string
	for _, cg := range strings.Fields(out) {
		parts := strings.Split(cg, "/")
		units = append(units, parts[len(parts)-1])
	}
	sort.Strings(units)
	return units
}

func stepUnits(res *systemd.Resolved) []string {
	var out []string
	for _, s := range res.Steps {
		out = append(out, s.Unit)
	}
	sort.Strings(out)
	return out
}

func heldUnits(hs []systemd.Held) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Unit+"("+string(h.Reason)+")")
	}
	sort.Strings(out)
	return out
}

// Peer check of scenario 2: for a library only rsyslog loads, strata's
// plan and needrestart's list are the same one service.
func TestPeerNeedrestartOneLibrary(t *testing.T) {
	l := newLab(t, "live-peer-lib")
	lib := onlyLib(t, l, "rsyslog.service", "syslog.service")
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/" + lib, Src: l.grown(lib)}}})
	before := l.units()
	res, listed := peer(t, l, file)
	got := stepUnits(res)
	maps := mapping(t, l, filepath.Base(lib))
	t.Logf("strata: restart %v; needrestart: %v; processes mapping %s: %v", got, listed, filepath.Base(lib), maps)
	if strings.Join(got, " ") != "rsyslog.service" || strings.Join(maps, " ") != "rsyslog.service" {
		t.Fatalf("strata plans %v, the processes mapping %s are in %v; want rsyslog.service from both", got, lib, maps)
	}
	if len(listed) != 0 {
		t.Logf("needrestart now sees layered changes (%v): update docs/benchmarks.md", listed)
	}
	if _, errOut, code := l.strata("restart-pending", "--root", "/", "--restart-with", "systemd"); code != 0 {
		t.Fatalf("restart-pending exited %d:\n%s", code, errOut)
	}
	l.requireChanged(before, "rsyslog.service")
	count(t, []string{"try-restart rsyslog.service"})
}

// Scenario 9: libc changes on a running node. The running units that load
// it restart once each (instances, never templates), systemd re-executes,
// the bus and the never-restart units wait for a reboot, nothing inactive
// starts, and the node stays up. The set is compared with needrestart's.
func TestLibcUpdate(t *testing.T) {
	l := newLab(t, "live-libc")
	const libc = "usr/lib/x86_64-linux-gnu/libc.so.6"
	c, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/" + libc, Src: l.grown(libc)}}})
	// The new libc travels as a patch, which the node rebuilds from the
	// copy in its read-only image.
	if len(c.Manifest.Patches) != 1 || c.Manifest.Patches[0].Path != libc || c.Manifest.Patches[0].Size > 4096 {
		t.Fatalf("libc does not ship as a small patch: %+v", c.Manifest.Patches)
	}
	before := l.units()
	pid1 := l.sh("systemctl show -p ExecMainStartTimestampMonotonic --value -- init.scope; cat /proc/1/stat | cut -d' ' -f22")
	res, listed := peer(t, l, file)
	steps := stepUnits(res)
	maps := mapping(t, l, "libc.so.6")
	t.Logf("processes mapping libc.so.6 run in: %v", maps)
	t.Logf("strata: restart %v, re-exec %v, reboot %v, skipped %d", steps, res.DaemonReexec, heldUnits(res.Deferred), len(res.Skipped))
	t.Logf("needrestart: %v", listed)
	if !res.DaemonReexec {
		t.Error("libc changed but systemd does not re-execute")
	}
	seen := map[string]bool{}
	for _, u := range steps {
		switch {
		case seen[u]:
			t.Errorf("%s acts twice", u)
		case strings.HasSuffix(u, "@.service"):
			t.Errorf("template %s in the plan", u)
		case before[u].ActiveState != "active":
			t.Errorf("%s is %s but would be restarted", u, before[u].ActiveState)
		}
		seen[u] = true
	}
	deferred := strings.Join(heldUnits(res.Deferred), " ")
	for _, want := range []string{"dbus.service(never-restart)", "systemd-logind.service(never-restart)"} {
		if !strings.Contains(deferred, want) {
			t.Errorf("deferred %s, want %s among them", deferred, want)
		}
	}
	for _, u := range []string{"nginx.service", "rsyslog.service"} {
		if !seen[u] {
			t.Errorf("%s loads libc and runs, but is not restarted (plan %v)", u, steps)
		}
	}
	if _, errOut, code := l.strata("restart-pending", "--root", "/", "--restart-with", "systemd"); code != 0 {
		t.Fatalf("restart-pending exited %d:\n%s", code, errOut)
	}
	l.requireChanged(before, steps...)
	if got := l.sh("systemctl show -p ExecMainStartTimestampMonotonic --value -- init.scope; cat /proc/1/stat | cut -d' ' -f22"); got != pid1 {
		t.Errorf("PID 1 changed: %q -> %q", pid1, got)
	}
	if state := strings.TrimSpace(l.sh("systemctl is-system-running || true")); state != "running" && state != "degraded" {
		t.Fatalf("the node is %s after the libc update", state)
	}
	st := l.status()
	if len(st.Reboot) == 0 {
		t.Error("status names no unit waiting for a reboot")
	}
	// The rebuilt libc is the one the overlay names, byte for byte.
	for _, e := range c.Manifest.Entries {
		if got := strings.Fields(l.sh("sha256sum /" + libc))[0]; e.Path == libc && got != e.SHA256 {
			t.Errorf("the node's libc has sha256 %s, the overlay says %s", got, e.SHA256)
		}
	}
	l.audit()
	// strata's plan against needrestart's method (the units whose
	// processes map libc): every such unit is restarted or deferred
	// (init.scope is PID 1: re-executed), and nothing else is restarted.
	planned := map[string]bool{"init.scope": res.DaemonReexec}
	for _, u := range steps {
		planned[u] = true
	}
	for _, h := range res.Deferred {
		planned[h.Unit] = true
	}
	mapped := map[string]bool{}
	for _, u := range maps {
		mapped[u] = true
		if !planned[u] {
			t.Errorf("%s maps libc but strata neither restarts nor defers it", u)
		}
	}
	for _, u := range steps {
		if !mapped[u] {
			t.Errorf("strata restarts %s, but none of its processes maps libc", u)
		}
	}
	t.Logf("needrestart -b -r l on the layered node lists: %v", listed)
	var acted []string
	for _, u := range steps {
		acted = append(acted, "restart "+u)
	}
	count(t, append(acted, "daemon-reexec"))
}
