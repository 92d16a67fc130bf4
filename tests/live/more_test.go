//go:build debian

package live_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/overlay"
)

// onlyLib returns a library (a regular file of the node) that only the
// units of names (a unit and its aliases) load.
func onlyLib(t *testing.T, l *lab, names ...string) string {
	t.Helper()
	users := map[string]map[string]bool{}
	for _, s := range l.catalog().Services {
		for _, lib := range s.Libraries {
			if users[lib] == nil {
				users[lib] = map[string]bool{}
			}
			users[lib][s.Unit] = true
		}
	}
	allowed := map[string]bool{}
	for _, n := range names {
		allowed[n] = true
	}
	var libs []string
	for lib, us := range users {
		only := true
		for u := range us {
			only = only && allowed[u]
		}
		fi, err := os.Lstat(filepath.Join(l.node.Root(), lib))
		if only && err == nil && fi.Mode().IsRegular() {
			libs = append(libs, lib)
		}
	}
	if len(libs) == 0 {
		t.Fatalf("no library only %v load", names)
	}
	sort.Strings(libs)
	return libs[0]
}

// Scenario 2: a shared library that only one service loads is replaced:
// that service restarts and nothing else does.
func TestLibraryOfOneService(t *testing.T) {
	l := newLab(t, "live-lib")
	lib := onlyLib(t, l, "rsyslog.service", "syslog.service")
	before := l.units()
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/" + lib, Src: l.grown(lib)}}})
	rep := l.mustApply(file)
	if got := strings.Join(acted(rep), ", "); got != "try-restart rsyslog.service" {
		t.Fatalf("replacing %s: acted %s, want only the restart of rsyslog", lib, got)
	}
	l.requireChanged(before, "rsyslog.service")
	t.Logf("replaced %s: restarted rsyslog.service only", lib)
	count(t, acted(rep))
	l.audit()
}

// Scenario 6: after three overlays and a reboot, the layers are stacked
// before PID 1 starts (the services come up on the layered config) and
// the file audit passes.
func TestRebootAfterThreeOverlays(t *testing.T) {
	l := newLab(t, "live-reboot")
	_, f1 := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-live.conf", Src: l.file(nginxSite("8081", "layer-one"))}}})
	_, f2 := l.create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/note", Src: l.file("two\n")}}})
	_, f3 := l.create("1.0.3", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-live.conf", Src: l.file(nginxSite("8081", "layer-three"))}}, Deletes: []string{"/etc/motd"}})
	l.mustApply(f1, f2, f3)
	if err := l.node.Reboot(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.wait()
	if body := l.get("8081"); !strings.Contains(body, "layer-three") {
		t.Fatalf("after the reboot nginx serves:\n%s", body)
	}
	if out := l.sh("cat /usr/share/strata-live/note; test ! -e /etc/motd && echo motd-gone"); out != "two\nmotd-gone\n" {
		t.Fatalf("after the reboot: %q", out)
	}
	if st := l.status(); strings.Join(st.Layers, " ") != "1.0.1 1.0.2 1.0.3" || st.Active == nil || !*st.Active {
		t.Fatalf("status after the reboot: layers %v, active %v", st.Layers, st.Active)
	}
	l.audit()
}

// Scenario 8: a node that missed an overlay refuses the next one and
// names what is missing; --repo --through catches it up in order.
func TestMissedOverlayCatchUp(t *testing.T) {
	l := newLab(t, "live-gap")
	l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/a", Src: l.file("a\n")}}})
	l.create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/b", Src: l.file("b\n")}}})
	_, f3 := l.create("1.0.3", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/c", Src: l.file("c\n")}}})
	_, errOut, code := l.apply(f3)
	if code != 3 || !strings.Contains(errOut, "missing: 1.0.1, 1.0.2") {
		t.Fatalf("apply of 1.0.3 on 1.0.0 exited %d, want 3 naming 1.0.1 and 1.0.2:\n%s", code, errOut)
	}
	linkTree(t, l.repo, filepath.Join(l.state, "var/tmp/repo"))
	if _, errOut, code := l.strata("apply-overlay", "--root", "/", "--repo", "/var/tmp/repo", "--through", "1.0.2"); code != 0 {
		t.Fatalf("catching up through 1.0.2 exited %d:\n%s", code, errOut)
	}
	if st := l.status(); st.Head.Version != "1.0.2" {
		t.Fatalf("head %s after --through 1.0.2", st.Head.Version)
	}
	if _, errOut, code := l.strata("apply-overlay", "--root", "/", "--repo", "/var/tmp/repo"); code != 0 {
		t.Fatalf("catching up to the head exited %d:\n%s", code, errOut)
	}
	if out := l.sh("cat /usr/share/strata-live/a /usr/share/strata-live/b /usr/share/strata-live/c"); out != "a\nb\nc\n" {
		t.Fatalf("after catching up: %q", out)
	}
	if out, errOut, code := l.strata("verify-sequence", "--root", "/", "--repo", "/var/tmp/repo", "--files"); code != 0 {
		t.Fatalf("audit against the repository exited %d:\n%s%s", code, out, errOut)
	}
}

// Scenario 7: strata killed at each fault point of a live apply and of a
// rollback: after the next run the node is at the old or the new head,
// never a mix, its stacks match its ledger and the audit passes.
func TestKilledAtEveryFaultPoint(t *testing.T) {
	faulty := filepath.Join(t.TempDir(), "strata-faults")
	build := exec.Command("go", "build", "-tags", "strata_faults", "-o", faulty, "github.com/strata-dev/strata/cmd/strata")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building strata with fault points: %v\n%s", err, out)
	}
	l := newLab(t, "live-faults")
	raw, err := os.ReadFile(faulty)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.state, "var/tmp/strata-faults"), raw, 0o755); err != nil {
		t.Fatal(err)
	}
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-live.conf", Src: l.file(nginxSite("8081", "faults"))}}})
	served := func() bool { return strings.Contains(l.sh("ls /etc/nginx/conf.d"), "strata-live.conf") }
	check := func(op, point string) {
		t.Helper()
		st := l.status()
		switch {
		case st.Head.Version == "1.0.0" && !served(), st.Head.Version == "1.0.1" && served():
		default:
			t.Fatalf("%s killed at %s: head %s but the stacked /etc has the layer: %v", op, point, st.Head.Version, served())
		}
		l.audit()
	}
	run := func(point string, args ...string) int {
		out, errOut, err := l.node.Exec(t.Context(), append([]string{"/usr/bin/env", "STRATA_TEST_CRASH=" + point, "/var/tmp/strata-faults"}, args...)...)
		if err == nil {
			return 0
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		t.Fatalf("running strata-faults: %v\n%s%s", err, out, errOut)
		return -1
	}
	fired := 0
	for _, point := range []string{"layer-written", "switched", "restarting", "before-ledger", "after-ledger"} {
		code := run(point, "apply-overlay", "--root", "/", file)
		if code != 99 {
			t.Fatalf("apply with a crash at %s exited %d, want 99", point, code)
		}
		fired++
		// The next run: activation settles the switch from the ledger.
		if _, errOut, code := l.strata("activate", "--root", "/"); code != 0 {
			t.Fatalf("activate after a crash at %s exited %d:\n%s", point, code, errOut)
		}
		check("apply", point)
		if l.status().Head.Version == "1.0.0" {
			l.mustApply(file)
		}
		for _, rpoint := range []string{"switched", "before-ledger", "after-ledger"} {
			if point != "after-ledger" {
				break // the rollback points are tried once, below
			}
			code := run(rpoint, "rollback", "--root", "/", "--no-hold")
			if code != 99 {
				t.Fatalf("rollback with a crash at %s exited %d, want 99", rpoint, code)
			}
			fired++
			if _, errOut, code := l.strata("rollback", "--root", "/", "--no-hold"); code != 0 && !strings.Contains(errOut, "nothing to roll back") {
				t.Fatalf("rollback after a crash at %s exited %d:\n%s", rpoint, code, errOut)
			}
			check("rollback", rpoint)
			l.mustApply(file)
		}
		if _, errOut, code := l.strata("rollback", "--root", "/", "--no-hold"); code != 0 {
			t.Fatalf("rollback exited %d:\n%s", code, errOut)
		}
		check("rollback", "none")
	}
	t.Logf("killed strata at %d points; every time the node was at the old or the new head", fired)
}
