//go:build debian

package live_test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// nginxSite is a valid extra server block, answering with body.
func nginxSite(port, body string) string {
	return "server {\n  listen 127.0.0.1:" + port + ";\n  location / { return 200 \"" + body + "\\n\"; }\n}\n"
}

// Scenario 1: a config change under /etc/nginx reloads nginx (same
// MainPID, the new config answers over loopback) and touches nothing else.
func TestNginxConfigReloads(t *testing.T) {
	l := newLab(t, "live-reload")
	nginx := l.unit("nginx.service")
	before := l.units()
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-live.conf", Src: l.file(nginxSite("8081", "layered-1"))}}})
	plan, _, _ := l.strata("apply-overlay", "--root", "/", "--dry-run", file)
	t.Logf("inside the node: strata apply-overlay --root / --dry-run %s\n%s", file, plan)
	rep := l.mustApply(file)
	after := l.units()
	var table []string
	for _, name := range sortedKeys(before) {
		if b, a := before[name], after[name]; b.MainPID != 0 {
			table = append(table, fmt.Sprintf("  %-34s MainPID %6d -> %6d  %s", name, b.MainPID, a.MainPID, map[bool]string{true: "same invocation", false: "RESTARTED"}[b.InvocationID == a.InvocationID]))
		}
	}
	t.Logf("after the apply (nginx reloaded in place):\n%s", strings.Join(table, "\n"))
	if got := strings.Join(acted(rep), ", "); got != "try-reload-or-restart nginx.service" {
		t.Fatalf("acted: %s, want only the reload of nginx", got)
	}
	if p := rep.Plans[0]; len(p.Validated) != 1 || p.Validated[0] != "nginx.service" {
		t.Errorf("validated %v, want nginx.service (nginx -t on the staged layer)", p.Validated)
	}
	if got := l.unit("nginx.service"); got.MainPID != nginx.MainPID || got.InvocationID != nginx.InvocationID {
		t.Errorf("nginx MainPID %d -> %d, invocation %s -> %s: restarted, not reloaded", nginx.MainPID, got.MainPID, nginx.InvocationID, got.InvocationID)
	}
	if body := l.get("8081"); !strings.Contains(body, "layered-1") {
		t.Fatalf("GET :8081 after the reload:\n%s", body)
	}
	l.requireChanged(before)
	count(t, acted(rep))
	l.audit()

	// Runtime truth: strata's reload recorded what nginx loaded. A broken
	// config put in by hand (mounted over the file: the live /etc and
	// its layer images are read-only) is named, refused by nginx -t run
	// in the sandbox against the tree on disk, and strata restart does
	// not restart nginx onto it; the file put back, nginx is current
	// again.
	if u := l.unitConfig("nginx.service"); !u.Current() || u.LoadedBy != "apply 1.0.1" || u.Loaded != u.Head || u.InvocationID != nginx.InvocationID {
		t.Fatalf("nginx.service after the apply's reload: %+v (invocation %s)", u, nginx.InvocationID)
	}
	undo := l.handEdit("etc/nginx/conf.d/strata-live.conf", "this is not nginx;\n")
	u := l.unitConfig("nginx.service")
	if u.State != schema.UnitBad || !strings.Contains(u.Note, "config on disk is bad") || !slices.Equal(u.Differ, []string{"etc/nginx/conf.d/strata-live.conf"}) {
		t.Fatalf("nginx.service with a broken config put in by hand: %+v", u)
	}
	if _, errOut, code := l.strata("restart", "--root", "/", "--unit", "nginx.service"); code != 3 || !strings.Contains(errOut, "config on disk is bad") {
		t.Fatalf("strata restart onto a bad config exited %d, want 3:\n%s", code, errOut)
	}
	if got := l.unit("nginx.service"); got.MainPID != nginx.MainPID || got.InvocationID != nginx.InvocationID {
		t.Fatalf("nginx was restarted onto a bad config")
	}
	undo()
	if u = l.unitConfig("nginx.service"); !u.Current() {
		t.Fatalf("nginx.service with its file put back: %+v", u)
	}
}

// Scenario 3: a unit file changes: daemon-reload, and that unit restarts
// with the new definition; nothing else restarts.
func TestUnitFileChangeRestarts(t *testing.T) {
	l := newLab(t, "live-unitfile")
	before := l.units()
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/systemd/system/rsyslog.service.d/strata-live.conf", Src: l.file("[Service]\nEnvironment=STRATA_LIVE=3\n")}}})
	rep := l.mustApply(file)
	if got := strings.Join(acted(rep), ", "); got != "daemon-reload , try-restart rsyslog.service" {
		t.Fatalf("acted: %s, want daemon-reload and the restart of rsyslog", got)
	}
	if env := l.sh("systemctl show -p Environment rsyslog.service"); !strings.Contains(env, "STRATA_LIVE=3") {
		t.Fatalf("rsyslog runs without its new definition: %s", env)
	}
	l.requireChanged(before, "rsyslog.service")
	count(t, acted(rep))
	l.audit()
}

// Scenario 4: a config that fails validation is refused by overlay
// create (nginx -t in the line's tree), and, published past it with
// --skip-validation, by the node before the live tree changes; no unit is
// touched, the ledger does not move.
func TestInvalidConfigRefused(t *testing.T) {
	l := newLab(t, "live-invalid")
	before := l.units()
	ledger := l.ledger()
	broken := overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/broken.conf", Src: l.file("this is not nginx;\n")}}}
	// In a process of its own, as publishCLI explains.
	out, err := exec.Command(l.img.Strata, "overlay", "create", "--repo", l.repo, "--version", "1.0.1", "--key", l.img.Key, "--add", "/etc/nginx/conf.d/broken.conf="+broken.Adds[0].Src).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "nginx.service refuses the change") {
		t.Fatalf("overlay create of a broken nginx config: %v, want exit 3 naming nginx.service:\n%s", err, out)
	}
	_, file := l.createWith("1.0.1", broken, overlay.CreateOptions{SkipValidation: "testing the node's own validation"})
	_, errOut, code := l.apply(file)
	if code != 3 || !strings.Contains(errOut, "nginx.service does not validate") {
		t.Fatalf("apply of a broken nginx config exited %d, want 3 naming nginx.service:\n%s", code, errOut)
	}
	if out := l.sh("ls /etc/nginx/conf.d/"); strings.Contains(out, "broken.conf") {
		t.Fatal("the refused config reached the live /etc")
	}
	if got := l.ledger(); len(got.Entries) != len(ledger.Entries) {
		t.Fatalf("the ledger moved: %d records, had %d", len(got.Entries), len(ledger.Entries))
	}
	l.requireChanged(before)
	count(t, nil)
	l.audit()

}

// Scenario 5: a change that passes validation but makes its service
// fail: switched back automatically, the service runs the old definition,
// the ledger records the failed attempt, exit 5.
func TestFailingServiceTakenBack(t *testing.T) {
	l := newLab(t, "live-failing")
	_, file := l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/systemd/system/rsyslog.service.d/strata-broken.conf", Src: l.file("[Service]\nExecStartPre=/bin/false\n")}}})
	_, errOut, code := l.apply(file)
	if code != 5 || !strings.Contains(errOut, "taken back") {
		t.Fatalf("apply exited %d, want 5 (taken back):\n%s", code, errOut)
	}
	if u := l.unit("rsyslog.service"); u.ActiveState != "active" {
		t.Fatalf("rsyslog is %s/%s after the switch back", u.ActiveState, u.SubState)
	}
	if out := l.sh("systemctl cat rsyslog.service"); strings.Contains(out, "strata-broken") {
		t.Fatalf("rsyslog still has the broken drop-in:\n%s", out)
	}
	led := l.ledger()
	if n := len(led.Entries); n != 3 {
		t.Fatalf("ledger has %d records, want 3 (image, failed attempt, restart record):\n%+v", n, led.Entries)
	}
	failed, settled := led.Entries[1], led.Entries[2]
	if failed.Action != manifests.LedgerFailed || failed.Version != "1.0.1" || failed.Head != led.Entries[0].Head || failed.Error == "" || len(failed.Pending) == 0 {
		t.Fatalf("second ledger record %+v, want the failed attempt of 1.0.1 at the image's head, with its error and the restarts it owes", failed)
	}
	if settled.Action != manifests.LedgerRestart || settled.Head != failed.Head || len(settled.Pending) != 0 {
		t.Fatalf("last ledger record %+v, want a restart record at the image's head with nothing pending", settled)
	}
	if out, _, _ := l.strata("status", "--root", "/"); !strings.Contains(out, "failed    1.0.1") {
		t.Errorf("status does not name the failed attempt:\n%s", out)
	}
	count(t, []string{"try-restart rsyslog.service (failed, taken back)"})
	l.audit()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Scenario 5b: a change that validates (nginx -t passes) and leaves the
// service active, but fails the service's declared health check (nginx
// no longer serves its default site on port 80): taken back like a
// failed restart, and the site answers again.
func TestHealthCheckFailureTakenBack(t *testing.T) {
	l := newLab(t, "live-health")
	before := l.units()
	if body := l.get("80"); !strings.Contains(body, "200 OK") {
		t.Fatalf("GET :80 before the change:\n%s", body)
	}
	c := overlay.Change{Deletes: []string{"/etc/nginx/sites-enabled/default"}, Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-elsewhere.conf", Src: l.file(nginxSite("8082", "elsewhere"))}}}
	_, file := l.create("1.0.1", c)
	_, errOut, code := l.apply(file)
	if code != 5 || !strings.Contains(errOut, "health check of nginx.service") || !strings.Contains(errOut, "taken back") {
		t.Fatalf("apply exited %d, want 5 naming the health check of nginx.service:\n%s", code, errOut)
	}
	if u := l.unit("nginx.service"); u.ActiveState != "active" {
		t.Fatalf("nginx is %s/%s after the switch back", u.ActiveState, u.SubState)
	}
	if body := l.get("80"); !strings.Contains(body, "200 OK") {
		t.Fatalf("GET :80 after the switch back:\n%s", body)
	}
	led := l.ledger()
	if failed := led.Entries[1]; failed.Action != manifests.LedgerFailed || !strings.Contains(failed.Error, "health check of nginx.service") {
		t.Fatalf("ledger record 1 %+v, want the failed attempt naming the health check", failed)
	}
	// Taking back reloads nginx again (reload-or-restart: whatever its
	// state) onto the old config, in place; no unit restarted.
	l.requireChanged(before)
	count(t, []string{"try-reload-or-restart nginx.service (failed its check, taken back)", "reload-or-restart nginx.service"})
	l.audit()
}
