//go:build debian

package live_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/testnode"
)

// cluster is a fleet of test hosts: nodes on the test network, each
// running the image's sshd with its own host key (made at first boot),
// one repository, an SSH identity root may log in with, a known_hosts
// file and an inventory.
type cluster struct {
	t          *testing.T
	dir        string
	repo       string
	key        *sign.Key
	img        *testnode.Image
	labs       []*lab
	identity   string
	knownHosts string
	inventory  string
}

func newCluster(t *testing.T, prefix string, n int) *cluster {
	t.Helper()
	img, err := testnode.DebianImage(t)
	if err != nil {
		t.Fatal(err)
	}
	key, err := sign.LoadKey(img.Key)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: t.TempDir(), img: img, key: key}
	c.repo = filepath.Join(c.dir, "repo")
	if _, err := repo.Init(context.Background(), c.repo, img.Squashfs, key); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	c.identity = filepath.Join(c.dir, "id_ed25519")
	if err := os.WriteFile(c.identity, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	authorized := ssh.MarshalAuthorizedKey(sshPub)
	var known strings.Builder
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i+1)
		l := startLab(t, name, c.repo, func(state string) {
			dir := filepath.Join(state, "identity/ssh")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), authorized, 0o600); err != nil {
				t.Fatal(err)
			}
		})
		c.labs = append(c.labs, l)
		if u := l.unit("ssh.service"); u.ActiveState != "active" {
			t.Fatalf("%s: ssh.service is %s/%s", name, u.ActiveState, u.SubState)
		}
		hostKey, err := os.ReadFile(filepath.Join(l.state, "var/lib/ssh/ssh_host_ed25519_key.pub"))
		if err != nil {
			t.Fatalf("%s: no host key made at first boot: %v", name, err)
		}
		fmt.Fprintf(&known, "%s %s", l.node.Address(), hostKey)
	}
	c.knownHosts = filepath.Join(c.dir, "known_hosts")
	if err := os.WriteFile(c.knownHosts, []byte(known.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.writeInventory(0)
	return c
}

// writeInventory writes the cluster's inventory; with agentPort, each
// node's entry has its agent's health URL on that port.
func (c *cluster) writeInventory(agentPort int) {
	c.t.Helper()
	c.inventory = filepath.Join(c.dir, "inventory.yaml")
	var inv strings.Builder
	inv.WriteString("nodes:\n")
	for _, l := range c.labs {
		fmt.Fprintf(&inv, "  - name: %s\n    address: %s\n    user: root\n    groups: [web]\n", l.node.Name(), l.node.Address())
		if agentPort > 0 {
			fmt.Fprintf(&inv, "    health: http://%s:%d/health\n", l.node.Address(), agentPort)
		}
	}
	if err := os.WriteFile(c.inventory, []byte(inv.String()), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// publish creates the line's next overlay.
func (c *cluster) publish(version string, ch overlay.Change) {
	c.t.Helper()
	publishCLI(c.t, c.img, c.repo, version, ch, "")
}

// strata runs this checkout's strata on the host with the cluster's SSH
// settings appended (a HOME of its own: nothing of the host's ~/.ssh or
// ssh-agent is used) and returns stdout, stderr and the exit code.
func (c *cluster) strata(args ...string) (string, string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args = append(args, "--known-hosts", c.knownHosts, "--identity", c.identity, "--ssh-timeout", "3s")
	cmd := exec.CommandContext(ctx, c.img.Strata, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + c.dir}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	}
	c.t.Fatalf("strata %v: %v\n%s", args, err, errOut.String())
	return "", "", -1
}

// rollout runs strata rollout --json with args and decodes its report.
func (c *cluster) rollout(args ...string) (*fleet.RolloutReport, string, int) {
	c.t.Helper()
	out, errOut, code := c.strata(append([]string{"rollout", "--inventory", c.inventory, "--repo", c.repo, "--json"}, args...)...)
	var rep fleet.RolloutReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		c.t.Fatalf("rollout exited %d without a report: %v\n%s\n%s", code, err, out, errOut)
	}
	c.t.Logf("rollout %v exited %d: %+v\n%s", args, code, rep, errOut)
	return &rep, errOut, code
}

// outcomes maps node names to outcomes.
func outcomes(nodes []fleet.NodeResult) map[string]string {
	m := map[string]string{}
	for _, n := range nodes {
		m[n.Name] = n.Outcome
	}
	return m
}

// heads reads each node's head from its own ledger.
func (c *cluster) heads() map[string]string {
	m := map[string]string{}
	for _, l := range c.labs {
		m[l.node.Name()] = l.status().Head.Version
	}
	return m
}

// Test 2 of the fleet issue: a rollout to five hosts, one of them cut off
// (its link down): four updated, the fifth named as unreachable, exit 3;
// fleet status over SSH says the same. With its link back a rerun
// converges: four current, the fifth updated, exit 0, every node audits
// clean.
func TestRolloutUnreachableThenConverges(t *testing.T) {
	c := newCluster(t, "ro", 5)
	l := c.labs[0]
	c.publish("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-fleet.conf", Src: l.file(nginxSite("8085", "fleet-1"))}}})
	cut := c.labs[4]
	if err := cut.node.SetLink(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	rep, errOut, code := c.rollout("--max-unavailable", "2")
	if code != 3 {
		t.Fatalf("rollout with a node cut off exited %d, want 3:\n%s", code, errOut)
	}
	got := outcomes(rep.Nodes)
	for _, x := range c.labs[:4] {
		if got[x.node.Name()] != fleet.OutcomeUpdated {
			t.Errorf("%s: %s, want updated", x.node.Name(), got[x.node.Name()])
		}
	}
	for _, n := range rep.Nodes {
		if n.Name == "ro5" && (n.Outcome != fleet.OutcomeUnreachable || n.Error == "") {
			t.Errorf("ro5: %s %q, want unreachable with the error", n.Outcome, n.Error)
		}
	}
	if h := c.heads(); h["ro1"] != "1.0.1" || h["ro4"] != "1.0.1" || h["ro5"] != "1.0.0" {
		t.Fatalf("heads after the first rollout: %v", h)
	}
	if body := l.get("8085"); !strings.Contains(body, "fleet-1") {
		t.Errorf("ro1 does not serve the new site:\n%s", body)
	}
	// Fleet status over SSH (the inventory has no health URLs).
	out, errOut, code := c.strata("status", "--inventory", c.inventory, "--repo", c.repo, "--json")
	var st fleet.Report
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 3 {
		t.Fatalf("status exited %d (want 3): %v\n%s\n%s", code, err, out, errOut)
	}
	if st.Counts[fleet.StateCurrent] != 4 || st.Counts[fleet.StateUnreachable] != 1 {
		t.Errorf("status counts %v, want 4 current and 1 unreachable", st.Counts)
	}

	if err := cut.node.SetLink(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	rep, errOut, code = c.rollout("--max-unavailable", "2")
	if code != 0 {
		t.Fatalf("rerun exited %d, want 0:\n%s", code, errOut)
	}
	got = outcomes(rep.Nodes)
	if got["ro5"] != fleet.OutcomeUpdated || rep.Counts[fleet.OutcomeCurrent] != 4 {
		t.Fatalf("rerun: %v, want ro5 updated and 4 current", got)
	}
	for _, x := range c.labs {
		x.audit()
	}
	out, errOut, code = c.strata("status", "--inventory", c.inventory, "--repo", c.repo)
	if code != 0 || !strings.Contains(out, "5 nodes: 5 current") {
		t.Fatalf("status after the rerun exited %d:\n%s\n%s", code, out, errOut)
	}
	t.Logf("strata status --inventory:\n%s", out)
}

// Test 3: a canary whose health check fails (nginx moved off port 80,
// which its check requires; apply-overlay takes the overlay back) halts
// the rollout after the canary wave: the others are skipped and not one
// of their units changed.
func TestRolloutCanaryHalts(t *testing.T) {
	c := newCluster(t, "rc", 3)
	l := c.labs[0]
	c.publish("1.0.1", overlay.Change{Deletes: []string{"/etc/nginx/sites-enabled/default"}, Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-elsewhere.conf", Src: l.file(nginxSite("8082", "elsewhere"))}}})
	before := map[string]map[string]testnode.UnitState{}
	for _, x := range c.labs[1:] {
		before[x.node.Name()] = x.units()
	}
	rep, errOut, code := c.rollout("--canary", "1", "--max-unavailable", "2")
	if code != 3 {
		t.Fatalf("rollout exited %d, want 3:\n%s", code, errOut)
	}
	got := outcomes(rep.Nodes)
	if got["rc1"] != fleet.OutcomeFailed || got["rc2"] != fleet.OutcomeSkipped || got["rc3"] != fleet.OutcomeSkipped {
		t.Fatalf("outcomes %v, want rc1 failed and the others skipped", got)
	}
	if !strings.Contains(rep.Halted, "canary wave 1") || !strings.Contains(rep.Halted, "rc1") {
		t.Errorf("halted %q does not say the canary wave stopped it", rep.Halted)
	}
	for _, n := range rep.Nodes {
		if n.Name == "rc1" && !strings.Contains(n.Error, "health check of nginx.service") {
			t.Errorf("rc1's reason %q does not name the failed health check", n.Error)
		}
	}
	if h := c.heads(); h["rc1"] != "1.0.0" || h["rc2"] != "1.0.0" || h["rc3"] != "1.0.0" {
		t.Fatalf("heads after the halted rollout: %v", h)
	}
	for _, x := range c.labs[1:] {
		if changed := testnode.Changed(before[x.node.Name()], x.units()); len(changed) > 0 {
			t.Errorf("%s: units changed although it was skipped: %v", x.node.Name(), changed)
		}
	}
	for _, x := range c.labs {
		x.audit()
	}
}

// fileStamp is a file's content digest and modification time.
func fileStamp(t *testing.T, p string) string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x %d", sha256.Sum256(raw), fi.ModTime().UnixNano())
}

// Test 4 (without --repair): a rolling restart of the cluster's managed
// services (nginx and rsyslog, the ones the image declares): each gets a
// new invocation on every node, no other unit restarts, the data on the
// state partition and under /var is untouched, and the restarts are in
// the ledger. --unit narrows it; a unit no node knows fails the first
// node and halts.
func TestClusterRestart(t *testing.T) {
	c := newCluster(t, "rs", 3)
	var data []string
	for _, l := range c.labs {
		for _, rel := range []string{"data/volume.img", "var/lib/app/db"} {
			p := filepath.Join(l.state, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("workload data of "+l.node.Name()+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			data = append(data, p)
		}
	}
	stamps := map[string]string{}
	for _, p := range data {
		stamps[p] = fileStamp(t, p)
	}
	before := map[string]map[string]testnode.UnitState{}
	for _, l := range c.labs {
		before[l.node.Name()] = l.units()
	}
	out, errOut, code := c.strata("restart", "--inventory", c.inventory, "--json")
	if code != 0 {
		t.Fatalf("restart exited %d:\n%s\n%s", code, out, errOut)
	}
	var rep fleet.RestartReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Counts[fleet.OutcomeRestarted] != 3 {
		t.Fatalf("restart: %+v", rep)
	}
	for _, l := range c.labs {
		l.requireChanged(before[l.node.Name()], "nginx.service", "rsyslog.service")
		for _, u := range []string{"nginx.service", "rsyslog.service"} {
			if a, b := before[l.node.Name()][u], l.unit(u); a.InvocationID == b.InvocationID || b.ActiveState != "active" {
				t.Errorf("%s: %s invocation %s -> %s (%s)", l.node.Name(), u, a.InvocationID, b.InvocationID, b.ActiveState)
			}
		}
		if last := l.ledger().Last(); last.Action != "restart" || len(last.Done) == 0 {
			t.Errorf("%s: the ledger's last record is %s %v, want the restart", l.node.Name(), last.Action, last.Done)
		}
		l.audit()
	}
	for _, p := range data {
		if got := fileStamp(t, p); got != stamps[p] {
			t.Errorf("%s changed: %s -> %s", p, stamps[p], got)
		}
	}
	// One unit only.
	for _, l := range c.labs {
		before[l.node.Name()] = l.units()
	}
	if out, errOut, code := c.strata("restart", "--inventory", c.inventory, "--unit", "nginx.service", "--max-unavailable", "2"); code != 0 {
		t.Fatalf("restart --unit nginx.service exited %d:\n%s\n%s", code, out, errOut)
	}
	for _, l := range c.labs {
		l.requireChanged(before[l.node.Name()], "nginx.service")
	}
	// A unit the catalog does not have: the first wave fails, the rest
	// are skipped, nothing restarts.
	for _, l := range c.labs {
		before[l.node.Name()] = l.units()
	}
	out, errOut, code = c.strata("restart", "--inventory", c.inventory, "--unit", "ngnix.service")
	if code != 3 || !strings.Contains(out, "ngnix.service") || !strings.Contains(out, "skipped") {
		t.Fatalf("restart of an unknown unit exited %d (want 3, naming it):\n%s\n%s", code, out, errOut)
	}
	for _, l := range c.labs {
		l.requireChanged(before[l.node.Name()])
	}
}

// Test 4 with --repair: on one node a binary and a config that an
// overlay shipped drifted (changed in its layer on the state partition);
// restart --repair rebuilds that layer from the repository before the
// restart (the binary travels as a patch, rebuilt from the node's image),
// the node audits clean afterwards and serves the overlay's config; the
// other node needs no repair.
func TestClusterRestartRepair(t *testing.T) {
	c := newCluster(t, "rp", 2)
	l := c.labs[0]
	const nginx = "usr/sbin/nginx"
	c.publish("1.0.1", overlay.Change{Adds: []overlay.Add{
		{Dest: "/" + nginx, Src: l.grown(nginx)},
		{Dest: "/etc/nginx/conf.d/strata-fleet.conf", Src: l.file(nginxSite("8085", "fleet-1"))},
	}})
	if _, errOut, code := c.rollout(); code != 0 {
		t.Fatalf("rollout exited %d:\n%s", code, errOut)
	}
	// Drift on rp2: a byte of its layer image changed on the state
	// partition (the first one, which nothing reads: nginx serves on).
	bad := c.labs[1]
	layer := filepath.Join(bad.state, "var/lib/strata/layers/1.0.1.erofs")
	f, err := os.OpenFile(layer, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _, code := bad.strata("verify-sequence", "--root", "/", "--files"); code != 3 || !strings.Contains(out, "layers/1.0.1.erofs") {
		t.Fatalf("the drift is not seen: verify-sequence exited %d:\n%s", code, out)
	}
	before := bad.unit("nginx.service")
	out, errOut, code := c.strata("restart", "--inventory", c.inventory, "--repair", "--repo", c.repo, "--json")
	if code != 0 {
		t.Fatalf("restart --repair exited %d:\n%s\n%s", code, out, errOut)
	}
	var rep fleet.RestartReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Nodes {
		want := map[string]string{"rp1": "[]", "rp2": "[1.0.1]"}[n.Name]
		if n.Outcome != fleet.OutcomeRestarted || fmt.Sprint(n.Repaired) != want {
			t.Errorf("%s: %s, repaired %v; want restarted, repaired %s", n.Name, n.Outcome, n.Repaired, want)
		}
	}
	for _, x := range c.labs {
		x.audit()
		if body := x.get("8085"); !strings.Contains(body, "fleet-1") {
			t.Errorf("%s does not serve the overlay's site:\n%s", x.node.Name(), body)
		}
	}
	if after := bad.unit("nginx.service"); after.InvocationID == before.InvocationID || after.ActiveState != "active" {
		t.Errorf("nginx on rp2 was not restarted after the repair: %+v", after)
	}
}

// rollout --via agent: each node's agent (under its systemd, following a
// copy of the repository served inside the node, polling only once an
// hour) is nudged in turn, applies the head itself, and the rollout waits
// for its health to say so; one node per wave, canary first.
func TestRolloutViaAgent(t *testing.T) {
	c := newCluster(t, "ra", 3)
	c.writeInventory(9411)
	for _, l := range c.labs {
		l.publishInto(filepath.Join(l.state, "var/tmp/repo"))
		l.sh("systemd-run --quiet --unit=strata-test-serve /usr/bin/strata serve /var/tmp/repo --listen 127.0.0.1:8089")
		l.sh("systemd-run --quiet --unit=strata-test-agent /usr/bin/strata agent --root / --repo http://127.0.0.1:8089/ --interval 1h --jitter 0% --config /var/tmp/no-agent.yaml --listen 0.0.0.0:9411")
	}
	c.publish("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-fleet.conf", Src: c.labs[0].file(nginxSite("8085", "nudged"))}}})
	for _, l := range c.labs {
		l.publishInto(filepath.Join(l.state, "var/tmp/repo"))
	}
	// The agents wait for their next poll, an hour away.
	if h := c.heads(); h["ra1"] != "1.0.0" || h["ra3"] != "1.0.0" {
		t.Fatalf("heads before the nudges: %v", h)
	}
	// The agents answer their health once they have polled once.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, code := c.strata("status", "--inventory", c.inventory, "--json")
		if code == 0 || strings.Contains(out, `"behind"`) {
			if !strings.Contains(out, "unreachable") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agents do not answer:\n%s", out)
		}
		time.Sleep(time.Second)
	}
	rep, errOut, code := c.rollout("--via", "agent", "--key", c.img.Key, "--canary", "1", "--max-unavailable", "1")
	if code != 0 {
		t.Fatalf("rollout --via agent exited %d:\n%s", code, errOut)
	}
	for _, n := range rep.Nodes {
		if n.Outcome != fleet.OutcomeUpdated || n.To != "1.0.1" || n.Wave < 1 {
			t.Errorf("%s: %+v, want updated to 1.0.1 in a wave", n.Name, n)
		}
		// The NOTE column: what the agent's apply restarted or reloaded.
		if !slices.Contains(n.Units, "reload nginx.service") {
			t.Errorf("%s: units %v, want the agent's reload of nginx.service", n.Name, n.Units)
		}
	}
	if h := c.heads(); h["ra1"] != "1.0.1" || h["ra2"] != "1.0.1" || h["ra3"] != "1.0.1" {
		t.Fatalf("heads after the rollout: %v", h)
	}
	for _, l := range c.labs {
		if body := l.get("8085"); !strings.Contains(body, "nudged") {
			t.Errorf("%s does not serve the new site:\n%s", l.node.Name(), body)
		}
		l.audit()
	}
	// A key the nodes do not trust: the first agent refuses the nudge.
	c.publish("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/x", Src: c.labs[0].file("x\n")}}})
	for _, l := range c.labs {
		l.publishInto(filepath.Join(l.state, "var/tmp/repo"))
	}
	stranger := filepath.Join(c.dir, "stranger")
	if err := sign.Generate(stranger); err != nil {
		t.Fatal(err)
	}
	rep, _, code = c.rollout("--via", "agent", "--key", stranger+".key", "--max-unavailable", "1")
	if code != 3 || rep.Counts[fleet.OutcomeSkipped] != 2 {
		t.Fatalf("a nudge signed by an untrusted key: exit %d, %+v", code, rep)
	}
	if h := c.heads(); h["ra1"] != "1.0.1" {
		t.Fatalf("ra1 moved on an untrusted nudge: %v", h)
	}
}
