//go:build debian

package live_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/testnode"
)

func TestMain(m *testing.M) { testnode.Main(m) }

// counts collects, across scenarios, how many units were restarted or
// reloaded and how many were expected (scenario 10: they must be equal).
var counts struct {
	sync.Mutex
	runs []run
}

// run is what one scenario acted on: "ACTION UNIT" each.
type run struct {
	name  string
	acted []string
}

func count(t *testing.T, acted []string) {
	counts.Lock()
	defer counts.Unlock()
	counts.runs = append(counts.runs, run{t.Name(), acted})
}

// lab is one scenario's world: the image, a repository of its line and a
// running node.
type lab struct {
	t     *testing.T
	img   *testnode.Image
	key   *sign.Key
	repo  string
	state string
	node  *testnode.Node
	src   string
}

func newLab(t *testing.T, name string) *lab { return startLab(t, name, "", nil) }

// startLab starts a node named name. Its repository is repoDir when given
// (shared by several labs), else a new one; prepare, if set, runs on the
// node's state directory before it boots. Nodes started with a shared
// repository are on the test network (testnode.Config.Network).
func startLab(t *testing.T, name, repoDir string, prepare func(state string)) *lab {
	t.Helper()
	img, err := testnode.DebianImage(t)
	if err != nil {
		t.Fatal(err)
	}
	key, err := sign.LoadKey(img.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := &lab{t: t, img: img, key: key, repo: repoDir, state: filepath.Join(dir, "state"), src: filepath.Join(dir, "src")}
	if repoDir == "" {
		l.repo = filepath.Join(dir, "repo")
		if _, err := repo.Init(context.Background(), l.repo, img.Squashfs, key); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := testnode.SeedState(ctx, img.Squashfs, l.state); err != nil {
		t.Fatal(err)
	}
	im, err := repo.LoadImage(img.Squashfs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builder.WriteState(img.Squashfs, im, l.state); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(l.state)
	}
	// Timers stay off: a daily job starting mid-test (dpkg-db-backup,
	// apt-daily) would blur "exactly these units restarted".
	args := append(append([]string{}, testnode.DefaultSystemdArgs...), "systemd.mask=timers.target")
	l.node, err = testnode.Start(ctx, t, testnode.Config{Name: name, Image: img.Squashfs, State: l.state,
		Activate: []string{img.Strata, "activate", "--root", "{root}"}, SystemdArgs: args, Network: repoDir != ""})
	if err != nil {
		t.Fatal(err)
	}
	l.wait()
	return l
}

func (l *lab) wait() {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := l.node.WaitRunning(ctx); err != nil {
		l.t.Fatal(err)
	}
}

// file writes content to a new host file and returns its path.
func (l *lab) file(content string) string {
	l.t.Helper()
	if err := os.MkdirAll(l.src, 0o755); err != nil {
		l.t.Fatal(err)
	}
	f, err := os.CreateTemp(l.src, "f-")
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		l.t.Fatal(err)
	}
	return f.Name()
}

// create publishes the next overlay of the line and copies it into the
// node (its /var/tmp), returning the node-side path.
func (l *lab) create(version string, ch overlay.Change) (*overlay.Created, string) {
	l.t.Helper()
	return l.createWith(version, ch, overlay.CreateOptions{Version: version})
}

// createWith is create with options (o.Version is version).
func (l *lab) createWith(version string, ch overlay.Change, o overlay.CreateOptions) (*overlay.Created, string) {
	l.t.Helper()
	c := publishCLI(l.t, l.img, l.repo, version, ch, o.SkipValidation)
	raw, err := os.ReadFile(c.Path)
	if err != nil {
		l.t.Fatal(err)
	}
	name := filepath.Base(c.Path)
	if err := os.WriteFile(filepath.Join(l.state, "var/tmp", name), raw, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return c, "/var/tmp/" + name
}

// strata runs strata inside the node and returns stdout, stderr and the
// exit code.
func (l *lab) strata(args ...string) (string, string, int) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, errOut, err := l.node.Exec(ctx, append([]string{"/usr/bin/strata"}, args...)...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), string(errOut), 0
	case errors.As(err, &ee):
		return string(out), string(errOut), ee.ExitCode()
	}
	l.t.Fatalf("strata %v: %v\n%s", args, err, errOut)
	return "", "", -1
}

// apply applies node-side overlay files with the node's systemd and
// returns the report (nil when it failed), stderr and the exit code.
func (l *lab) apply(files ...string) (*node.ApplyReport, string, int) {
	l.t.Helper()
	out, errOut, code := l.strata(append([]string{"apply-overlay", "--root", "/", "--json"}, files...)...)
	if code != 0 {
		return nil, errOut, code
	}
	var rep node.ApplyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		l.t.Fatalf("apply report: %v\n%s", err, out)
	}
	return &rep, errOut, 0
}

func (l *lab) mustApply(files ...string) *node.ApplyReport {
	l.t.Helper()
	rep, errOut, code := l.apply(files...)
	if code != 0 {
		l.t.Fatalf("apply-overlay %v exited %d:\n%s", files, code, errOut)
	}
	return rep
}

func (l *lab) units() map[string]testnode.UnitState {
	l.t.Helper()
	u, err := l.node.Units(context.Background())
	if err != nil {
		l.t.Fatal(err)
	}
	return u
}

func (l *lab) unit(name string) testnode.UnitState {
	l.t.Helper()
	u, err := l.node.Unit(context.Background(), name)
	if err != nil {
		l.t.Fatal(err)
	}
	return u
}

// sh runs a fixed command line in the node through bash (test code only,
// fixed strings: no data from outside reaches it).
func (l *lab) sh(script string) string {
	l.t.Helper()
	out, errOut, err := l.node.Exec(context.Background(), "/bin/bash", "-c", script)
	if err != nil {
		l.t.Fatalf("%s: %v\n%s", script, err, errOut)
	}
	return string(out)
}

// handEdit puts content at /rel on the node as root there can: its
// layers are read-only images, so by mounting over rel's directory a copy
// of it (on /var, so that a validation sandbox carries it) with rel
// changed. It returns what takes the edit back.
func (l *lab) handEdit(rel, content string) func() {
	l.t.Helper()
	dir, name := path.Split("/" + rel)
	copyDir := "/var/tmp/strata-hand-edit/" + strings.ReplaceAll(strings.Trim(dir, "/"), "/", "_")
	l.sh(fmt.Sprintf("mkdir -p %[1]s && cp -a %[2]s. %[1]s/ && printf %%s %[3]s > %[1]s/%[4]s && mount --bind %[1]s %[2]s",
		copyDir, dir, shellQuote(content), name))
	return func() {
		l.t.Helper()
		l.sh(fmt.Sprintf("umount %s && rm -rf %s", dir, copyDir))
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// get fetches http://127.0.0.1:PORT/ inside the node.
func (l *lab) get(port string) string {
	l.t.Helper()
	return l.sh(`exec 3<>/dev/tcp/127.0.0.1/` + port + `; printf 'GET / HTTP/1.0\r\nHost: x\r\n\r\n' >&3; cat <&3`)
}

// audit runs verify-sequence --files inside the node and fails the test
// unless it passes.
func (l *lab) audit() {
	l.t.Helper()
	out, errOut, code := l.strata("verify-sequence", "--root", "/", "--files")
	if code != 0 {
		l.t.Fatalf("verify-sequence --files exited %d:\n%s%s", code, out, errOut)
	}
}

// ledger reads the node's ledger through the state directory.
func (l *lab) ledger() *manifests.Ledger {
	l.t.Helper()
	raw, err := os.ReadFile(filepath.Join(l.state, "var/lib/strata/ledger.json"))
	if err != nil {
		l.t.Fatal(err)
	}
	var led manifests.Ledger
	if err := manifests.Decode(raw, &led); err != nil {
		l.t.Fatal(err)
	}
	return &led
}

// requireChanged fails unless exactly want (sorted unit names) were
// restarted between before and now.
func (l *lab) requireChanged(before map[string]testnode.UnitState, want ...string) {
	l.t.Helper()
	got := testnode.Changed(before, l.units())
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		l.t.Fatalf("restarted units %v, want exactly %v\n%v", got, want, testnode.Changes(before, l.units()))
	}
}

// acted lists "ACTION UNIT" of what an apply report says ran.
func acted(rep *node.ApplyReport) []string {
	var out []string
	for _, p := range rep.Plans {
		for _, a := range p.Restarted {
			out = append(out, string(a.Action)+" "+a.Unit)
		}
	}
	return out
}

// linkTree copies the directory src to dst with hard links (same file
// system), so a repository with its image can enter a node cheaply.
func linkTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return os.Link(p, target)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// status reads strata status --json inside the node.
func (l *lab) status() *node.Status {
	l.t.Helper()
	out, errOut, code := l.strata("status", "--root", "/", "--json")
	if code != 0 {
		l.t.Fatalf("status exited %d: %s", code, errOut)
	}
	var st node.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		l.t.Fatalf("status: %v\n%s", err, out)
	}
	return &st
}

// catalog reads the image's service catalog.
func (l *lab) catalog() manifests.Catalog {
	l.t.Helper()
	im, err := repo.LoadImage(l.img.Squashfs, nil)
	if err != nil {
		l.t.Fatal(err)
	}
	return im.Manifest.Catalog
}

// grown writes a copy of the node's file p with bytes appended (a shared
// object stays loadable: nothing reads past its sections) and returns the
// host path.
func (l *lab) grown(p string) string {
	l.t.Helper()
	raw, err := os.ReadFile(filepath.Join(l.node.Root(), p))
	if err != nil {
		l.t.Fatal(err)
	}
	return l.file(string(raw) + strings.Repeat("\x00", 64))
}

// publishCLI publishes the next overlay of the line in repoDir with
// this checkout's strata, in a process of its own, and returns it. Its
// validation runs the sandbox, whose work ends the OS thread it ran on;
// a node this test process started carries Pdeathsig, which the kernel
// sends when the thread that started it ends, so publishing in-process
// could take a running node down with such a thread.
func publishCLI(t *testing.T, img *testnode.Image, repoDir, version string, ch overlay.Change, skipValidation string) *overlay.Created {
	t.Helper()
	args := []string{"--json", "overlay", "create", "--repo", repoDir, "--version", version, "--key", img.Key}
	for _, a := range ch.Adds {
		args = append(args, "--add", a.Dest+"="+a.Src)
	}
	for _, d := range ch.Deletes {
		args = append(args, "--delete", d)
	}
	if skipValidation != "" {
		args = append(args, "--skip-validation", skipValidation)
	}
	if ch.Tree != "" || len(ch.Restart)+len(ch.Reload)+len(ch.Exact) > 0 {
		t.Fatalf("publishCLI: only --add and --delete are passed on")
	}
	for _, a := range ch.Adds {
		if a.SetMode || a.SetOwner {
			t.Fatalf("publishCLI: --mode and --owner are not passed on")
		}
	}
	out, err := exec.Command(img.Strata, args...).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("creating %s: %v\n%s", version, err, stderr)
	}
	var res struct {
		Path     string                     `json:"path"`
		Digest   string                     `json:"digest"`
		Manifest *manifests.OverlayManifest `json:"manifest"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.Path == "" || res.Manifest == nil {
		t.Fatalf("creating %s: unreadable output (%v):\n%s", version, err, out)
	}
	return &overlay.Created{Path: res.Path, Digest: res.Digest, Manifest: res.Manifest}
}

// unitConfig is what strata status says of unit's config.
func (l *lab) unitConfig(unit string) schema.UnitConfig {
	l.t.Helper()
	st := l.status()
	if st.UnitsError != "" {
		l.t.Fatalf("status could not read the units: %s", st.UnitsError)
	}
	for _, u := range st.Units {
		if u.Unit == unit {
			return u
		}
	}
	l.t.Fatalf("status has no unit %s: %+v", unit, st.Units)
	return schema.UnitConfig{}
}

// waitFor polls cond every half second for up to three minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up", what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
