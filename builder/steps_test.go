package builder_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// shellRoot makes dir/rootfs a tiny root tree that can run the host's
// /bin/sh and chown: the programs and the libraries ldd lists, at their
// paths.
func shellRoot(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("run steps need root: run the tests as root")
	}
	var files []string
	for _, prog := range []string{"/bin/sh", "/bin/chown"} {
		out, err := exec.Command("ldd", prog).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", prog, err)
		}
		files = append(files, prog)
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "rootfs", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "fake-strata"), []byte("#!/bin/sh\necho strata\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

const stepsRecipe = `line: steps
version: 1.0.0
base:
  dir: rootfs
files:
  - {path: /etc/machine-id, content: "0123456789abcdef\n", mode: "0444"}
  - {path: /etc/resolv.conf, content: "nameserver 192.0.2.1\n"}
  - {path: /var/log, dir: true}
  - {path: /usr/sbin, dir: true}
steps:
  - copy: {path: /etc/greeting, content: "GREETING\n"}
  - run: >-
      read g < /etc/greeting; echo "$g world" > /etc/greeting2;
      read u < /proc/sys/kernel/random/uuid; echo "$u" > /etc/uuid;
      echo log > /var/log/x.log; echo x > /dev/null;
      [ -x /usr/sbin/policy-rc.d ] && echo yes > /etc/policy-seen;
      echo junk > /tmp/junk; echo $$ > /etc/pid;
      read r < /etc/resolv.conf; echo "$r" > /etc/resolv-seen;
      read m < /proc/self/uid_map; echo $m > /etc/uidmap-seen;
      echo 33 > /etc/owned33; chown 33:33 /etc/owned33
  - remove: /etc/greeting
  - run: echo second > /etc/second; [ -e /etc/greeting ] || echo gone > /etc/greeting-gone
  - run: i=0; while read l; do i=$((i+1)); done < /proc/net/dev; echo $i > /etc/netdev-lines
    network: none
  - copy: {path: /etc/after, content: "after\n"}
strata: {binary: fake-strata}
`

type stepsBuild struct {
	res      *builder.Result
	contents map[string][]byte
	log      string
}

func buildSteps(t *testing.T, key *sign.Key, recipe, out, cache string) (stepsBuild, error) {
	t.Helper()
	var log strings.Builder
	res, err := builder.Build(context.Background(), recipe, out, builder.WithKey(key), builder.WithCacheDir(cache),
		builder.WithProgress(func(s string) { log.WriteString(s + "\n") }))
	if err != nil {
		return stepsBuild{log: log.String()}, err
	}
	_, contents := readImage(t, res.Image)
	return stepsBuild{res: res, contents: contents, log: log.String()}, nil
}

func TestRunSteps(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	shellRoot(t, dir)
	cache := filepath.Join(dir, "cache")
	recipe := writeRecipe(t, dir, stepsRecipe)
	key := testKey(t)
	a, err := buildSteps(t, key, recipe, filepath.Join(dir, "a"), cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, a.log)
	}
	c := a.contents
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	first, _, _ := strings.Cut(string(hostResolv), "\n")
	for p, want := range map[string]string{
		"etc/greeting2":        "GREETING world\n",
		"etc/policy-seen":      "yes\n",
		"etc/resolv-seen":      first + "\n",
		"etc/resolv.conf":      "nameserver 192.0.2.1\n",
		"etc/machine-id":       "",
		"var/log/x.log":        "",
		"etc/second":           "second\n",
		"etc/greeting-gone":    "gone\n",
		"etc/netdev-lines":     "3\n", // two heading lines and lo: a network of its own
		"etc/after":            "after\n",
		"usr/bin/strata":       "#!/bin/sh\necho strata\n",
		"etc/greeting":         "<absent>",
		"tmp/junk":             "<absent>",
		"usr/sbin/policy-rc.d": "<absent>",
	} {
		got, ok := c[p]
		if !ok {
			got = []byte("<absent>")
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// The command is the first process of a PID namespace of its own,
	// root of a user namespace whose root is an unprivileged host id.
	if pid, err := strconv.Atoi(strings.TrimSpace(string(c["etc/pid"]))); err != nil || pid != 1 {
		t.Errorf("etc/pid = %q: want 1, the first process of a PID namespace of its own", c["etc/pid"])
	}
	if got, want := strings.TrimSpace(string(c["etc/uidmap-seen"])), "0 "+strconv.Itoa(sandbox.HostIDBase)+" 65536"; got != want {
		t.Errorf("the step's uid_map = %q, want %q (root inside, unprivileged outside)", got, want)
	}
	if len(c["etc/uuid"]) != 37 {
		t.Errorf("etc/uuid = %q: /proc was not mounted for the command", c["etc/uuid"])
	}
	files := map[string]manifests.Entry{}
	for _, e := range a.res.ManifestData.Files {
		files[e.Path] = e
	}
	if e := files["etc/machine-id"]; e.Mode != 0444 {
		t.Errorf("etc/machine-id mode %o, want 0444 kept", e.Mode)
	}
	if e := files["etc/owned33"]; e.UID != 33 || e.GID != 33 {
		t.Errorf("etc/owned33 = %+v: the step's chown did not reach the tree through the id mapping", e)
	}
	if e := files["etc/greeting2"]; e.UID != 0 || e.GID != 0 {
		t.Errorf("etc/greeting2 = %+v: a file the step made as root must be uid 0's", e)
	}
	if e := files["usr/bin/strata"]; e.Mode != 0755 || e.UID != 0 {
		t.Errorf("usr/bin/strata = %+v", e)
	}
	if e := files["etc/systemd/system/multi-user.target.wants/strata-verify.service"]; e.Target != "/usr/lib/systemd/system/strata-verify.service" {
		t.Errorf("strata-verify.service is not enabled: %+v", e)
	}
	if s := findService(a.res.ManifestData.Catalog, "strata-verify.service"); s == nil || !containsString(s.Binaries, "usr/bin/strata") {
		t.Errorf("catalog strata-verify.service = %+v", s)
	}
	assertNoMounts(t, dir)

	// The same recipe and cache: the steps are not run again, and the
	// image is byte-identical (the uuid and pid came from the first run).
	b, err := buildSteps(t, key, recipe, filepath.Join(dir, "b"), cache)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.log, "using cached steps") || strings.Contains(b.log, "run: ") {
		t.Errorf("second build ran the steps again:\n%s", b.log)
	}
	if !bytes.Equal(readFile(t, a.res.Image), readFile(t, b.res.Image)) {
		t.Error("two builds with the same cache give different squashfs files")
	}

	// A changed input before a run step changes the key: the steps run.
	changed := writeRecipe(t, dir, strings.Replace(stepsRecipe, "GREETING", "HELLO", 1))
	d, err := buildSteps(t, key, changed, filepath.Join(dir, "d"), cache)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.log, "using cached steps") || string(d.contents["etc/greeting2"]) != "HELLO world\n" {
		t.Errorf("a changed copy step reused the cache: %q\n%s", d.contents["etc/greeting2"], d.log)
	}
	if string(d.contents["etc/uuid"]) == string(c["etc/uuid"]) {
		t.Error("the rerun steps gave the same uuid: they did not run")
	}
	assertNoMounts(t, dir)
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// assertNoMounts fails when anything is mounted below dir.
func assertNoMounts(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir) {
			t.Errorf("%s is still mounted after the build", fields[4])
		}
	}
}

func TestRunStepFailure(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	shellRoot(t, dir)
	cache := filepath.Join(dir, "cache")
	recipe := writeRecipe(t, dir, "line: fail\nversion: 1.0.0\nbase:\n  dir: rootfs\nsteps:\n  - run: echo about to fail; exit 3\n")
	_, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out"), builder.WithCacheDir(cache))
	if err == nil || !strings.Contains(err.Error(), "steps[0].run") || !strings.Contains(err.Error(), "about to fail") {
		t.Fatalf("Build = %v, want an error naming steps[0].run and quoting the output", err)
	}
	ents, _ := os.ReadDir(filepath.Join(cache, "steps"))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("a failed run step left %s in the cache", e.Name())
		}
	}
	assertNoMounts(t, dir)
}
