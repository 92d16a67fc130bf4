package tests

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// TestHostileValidationEscape (issue 25, item 1): a validation command
// shipped in the signed image tries to leave its sandbox while `config
// set` runs it on the publishing host: through /proc/1/root, a chroot
// break, other processes' roots, a mount of the host's disk. Before the
// sandbox, the chroot it ran in let the first one write to the host. Now
// the edit is validated and published and the canary stays empty.
func TestHostileValidationEscape(t *testing.T) {
	dir := t.TempDir()
	recipe, canary := escapeRecipe(t, dir)
	yaml, err := os.ReadFile(filepath.Join(recipe, "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(yaml), "files:\n", "files:\n  - path: /usr/bin/escape\n    src: escape\n    mode: \"0755\"\n", 1)
	y = strings.Replace(y, "  - unit: demo-web.service\n", "  - unit: demo-web.service\n    validate: [/usr/bin/escape]\n", 1)
	if y == string(yaml) {
		t.Fatal("the demo recipe no longer has the lines this test edits")
	}
	if err := os.WriteFile(filepath.Join(recipe, "recipe.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, code := strata(args...)
		if code != 0 {
			t.Fatalf("strata %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	key := filepath.Join(dir, "line")
	run("key", "generate", "--out", key)
	run("build-image", filepath.Join(recipe, "recipe.yaml"), "--out", filepath.Join(dir, "img"), "--key", key+".key")
	repoDir := filepath.Join(dir, "repo")
	run("repo", "init", repoDir, "--image", filepath.Join(dir, "img", "demo-1.0.0.squashfs"), "--key", key+".key")
	conf := filepath.Join(dir, "web.conf")
	if err := os.WriteFile(conf, []byte("listen 8088\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run("config", "set", "--repo", repoDir, "--key", key+".key", "/etc/demo/web.conf="+conf)
	if !strings.Contains(out, "validated demo-web.service: /usr/bin/escape") {
		t.Errorf("the escape did not run as demo-web's validation:\n%s", out)
	}
	assertCanaryEmpty(t, canary, "the validation command")
}

// escapeRecipe copies the demo recipe to dir/demo with the escape
// program (testdata/escape) built beside it, aimed at a fresh canary
// directory, and returns both paths.
func escapeRecipe(t *testing.T, dir string) (recipe, canary string) {
	t.Helper()
	canary = filepath.Join(dir, "canary")
	if err := os.Mkdir(canary, 0o755); err != nil {
		t.Fatal(err)
	}
	recipe = filepath.Join(dir, "demo")
	if err := os.CopyFS(recipe, os.DirFS(demoDir)); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-ldflags", "-X main.canary="+canary, "-o", filepath.Join(recipe, "escape"), "./testdata/escape")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the escape: %v\n%s", err, out)
	}
	return recipe, canary
}

// assertCanaryEmpty fails when who wrote anything in canary.
func assertCanaryEmpty(t *testing.T, canary, who string) {
	t.Helper()
	if ents, _ := os.ReadDir(canary); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s wrote on the host: %v", who, names)
	}
}

// TestHostileBuildStepEscape (issue 25, item 1, build steps): a recipe's
// run step is the escape itself (it is the tree's /bin/sh). Under the
// chroot build steps used to run in, /proc/1/root was the host's root
// and the canary filled; in the sandbox the build succeeds, the step's
// report is in the progress, and the canary stays empty.
func TestHostileBuildStepEscape(t *testing.T) {
	dir := t.TempDir()
	recipe, canary := escapeRecipe(t, dir)
	yaml, err := os.ReadFile(filepath.Join(recipe, "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(yaml), "files:\n", "files:\n  - path: /bin/sh\n    src: escape\n    mode: \"0755\"\n", 1)
	if y == string(yaml) {
		t.Fatal("the demo recipe no longer has a files list")
	}
	y += "steps:\n  - run: escape from the build\n"
	if err := os.WriteFile(filepath.Join(recipe, "recipe.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "line")
	if out, code := strata("key", "generate", "--out", key); code != 0 {
		t.Fatalf("key generate: exit %d\n%s", code, out)
	}
	out, code := strata("build-image", filepath.Join(recipe, "recipe.yaml"), "--out", filepath.Join(dir, "img"), "--key", key+".key", "--cache", filepath.Join(dir, "cache"))
	if code != 0 {
		t.Fatalf("build-image: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "run: proc1root:") || !strings.Contains(out, "mount: operation not permitted") {
		t.Errorf("the escape's report is not in the build's progress:\n%s", out)
	}
	assertCanaryEmpty(t, canary, "the build step")
}

// TestHostileSpoolThroughLink (issue 25, item 2): apply-overlay --bundle
// - used to spool the bundle into the node's var/tmp, following a link
// there (one a signed overlay can plant) to any host directory. The node's
// var/tmp here leads to a host directory on a 4 KiB tmpfs: a spool
// through the link fails there for want of space, one on the host's own
// temporary directory applies.
func TestHostileSpoolThroughLink(t *testing.T) {
	c := newHCase(t)
	bundle := filepath.Join(c.scratch, "b.tar")
	if out, code := strata("bundle", "--repo", c.repo, "--from", "1.0.0", "--out", bundle); code != 0 {
		t.Fatalf("strata bundle: exit %d\n%s", code, out)
	}
	if fi, err := os.Stat(bundle); err != nil || fi.Size() <= 8<<10 {
		t.Fatalf("the bundle (%v, %v) must be over 8 KiB for the 4 KiB trap to catch it", fi, err)
	}
	small := filepath.Join(c.scratch, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(small, syscall.MNT_DETACH) })
	vartmp := filepath.Join(c.root, "var/tmp")
	if err := os.RemoveAll(vartmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(small, vartmp); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(strataBin, "apply-overlay", "--root", c.root, "--bundle", "-")
	cmd.Stdin = in
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "TMPDIR=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apply-overlay --bundle - on a node whose var/tmp is a link: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(small); len(ents) > 0 {
		t.Errorf("written through the node's var/tmp link: %v", ents)
	}
	if digestTree(t, c.canary) == "" {
		t.Error("the canary is gone")
	}
}

// TestHostileIdleClients (issue 25, item 3): anonymous clients that open
// keep-alive connections and go idle used to hold every slot of strata
// serve for its two-minute idle timeout. With four connections allowed
// and four idle clients, an index request is served at once (package
// serve's tests cover nudge waits, client shares and a fleet of 1,500
// waiting agents).
func TestHostileIdleClients(t *testing.T) {
	c := newHCase(t)
	cmd := exec.Command(strataBin, "serve", c.repo, "--listen", "127.0.0.1:0", "--max-conns", "4", "--max-waits", "2", "--max-per-client", "100")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("strata serve said nothing: %v", err)
	}
	_, rest, ok := strings.Cut(line, "on http://")
	addr, _, _ := strings.Cut(rest, "/")
	if !ok || addr == "" {
		t.Fatalf("no address in %q", line)
	}
	index := "GET /index.json HTTP/1.1\r\nHost: x\r\n\r\n"
	for range 4 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, index); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/index.json")
	if err != nil {
		t.Fatalf("an index request beside four idle clients: %v (they held every slot)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an index request beside four idle clients: %s", resp.Status)
	}
}

// TestStaleWorkingDirectories (issue 25, item 10): kills left
// $TMPDIR/strata-disk-* and strata-upgrade-* behind (110 and 38 after
// 188 kills, 1.6 GB). Any run removes those whose lock no process holds,
// once they are ten minutes old, and says so; one in use stays.
func TestStaleWorkingDirectories(t *testing.T) {
	tmp := t.TempDir()
	old := time.Now().Add(-time.Hour)
	stale := filepath.Join(tmp, "strata-disk-killed")
	inUse := filepath.Join(tmp, "strata-upgrade-running")
	edit := filepath.Join(tmp, "strata-edit-kept")
	for _, d := range []string{stale, inUse, edit} {
		if err := os.MkdirAll(filepath.Join(d, "root"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, ".strata-in-use"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A live process holds inUse's lock.
	holder := exec.Command("flock", "-x", filepath.Join(inUse, ".strata-in-use"), "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	for i := 0; ; i++ {
		if exec.Command("flock", "-n", "-x", filepath.Join(inUse, ".strata-in-use"), "true").Run() != nil {
			break // held
		}
		if i == 100 {
			t.Fatal("the holder never took the lock")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, d := range []string{stale, inUse, edit} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(strataBin, "version")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strata version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "removed 1 working directories killed runs left behind: "+stale) {
		t.Errorf("strata did not say what it removed:\n%s", out)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s stayed: %v", stale, err)
	}
	for _, d := range []string{inUse, edit} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// TestStrayStateWrites (issue 25, item 10): a kill during a ledger write
// left /var/lib/strata/.ledger.json.<random>, which no recovery, apply,
// rollback, gc or audit removed or reported. An audit reports it and
// writes nothing; gc (any run that changes the node) removes it, saying
// so.
func TestStrayStateWrites(t *testing.T) {
	c := newHCase(t)
	stray := filepath.Join(c.root, manifests.StateDir, ".ledger.json.3141592653")
	if err := os.WriteFile(stray, []byte(`{"half":`), 0o644); err != nil {
		t.Fatal(err)
	}
	before := digestTree(t, c.root)
	out, code := strata("verify-sequence", "--root", c.root)
	if code != 0 || !strings.Contains(out, ".ledger.json.3141592653") || !strings.Contains(out, "interrupted write") {
		t.Errorf("verify-sequence: exit %d, want 0 with a warning naming the stray:\n%s", code, out)
	}
	if digestTree(t, c.root) != before {
		t.Error("the audit changed the node")
	}
	out, code = strata("gc", "--root", c.root)
	if code != 0 || !strings.Contains(out, "removed 1 temporary files interrupted writes of node state left") {
		t.Errorf("gc: exit %d, want it to say it removed the stray:\n%s", code, out)
	}
	if _, err := os.Lstat(stray); !os.IsNotExist(err) {
		t.Errorf("the stray stayed: %v", err)
	}
}
