package nodetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
)

// Factory makes a fresh node of the backend under test from the signed
// image and returns its root. It registers its own cleanup.
type Factory func(t *testing.T, image string) string

// The suite's image: a small tree with a service, configuration under
// /etc, a program under /usr, and empty /var (node state) and /run.
const recipe = `line: conform
version: 1.0.0
epoch: 1700000000
base:
  dir: rootfs
files:
  - path: /etc/app/secret
    content: "s3cret\n"
    mode: "0600"
  - path: /etc/link
    symlink: app
  - path: /var
    dir: true
  - path: /run
    dir: true
services:
  - unit: app.service
    paths: [/etc/app/app.conf]
    reload: [/etc/app/conf.d]
`

var rootfs = map[string]string{
	"etc/app/app.conf":                   "port 80\n",
	"etc/app/conf.d/a.conf":              "a\n",
	"etc/app/old.d/x":                    "x\n",
	"etc/motd":                           "hello\n",
	"usr/bin/app":                        "#!/bin/sh\nexec sleep infinity\n",
	"usr/lib/systemd/system/app.service": "[Service]\nExecStart=/usr/bin/app\n",
	"usr/share/doc/readme":               "docs\n",
	"usr/lib/libbig.so":                  library(1, 256<<10),
}

// library returns n bytes that compress about as a shared library does,
// large enough for a change to it to ship as a patch.
func library(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(12))
		if r.IntN(3) == 0 {
			b[i] = byte(r.Uint32())
		}
	}
	return string(b)
}

// env is one run's image, key and repository.
type env struct{ *fixture.Fixture }

func newEnv(t *testing.T, opts []fixture.Option) *env {
	t.Helper()
	return &env{fixture.New(t, append([]fixture.Option{fixture.WithRecipe(recipe, rootfs)}, opts...)...)}
}

// rich is a change of every kind: a modified file, a new nested
// directory, a new symlink, a deleted file and a deleted directory.
func (e *env) rich(t *testing.T) overlay.Change {
	return overlay.Change{
		Adds: []overlay.Add{
			{Dest: "/etc/app/app.conf", Src: e.HostFile("port 81\n")},
			{Dest: "/etc/new/deep/x", Src: e.HostFile("new\n")},
			{Dest: "/usr/bin/app", Src: e.HostFile("#!/bin/sh\nexec sleep 1000\n")},
		},
		Deletes: []string{"/etc/motd", "/etc/app/old.d"},
	}
}

// state is what a test compares: the audit's view of the tree and the
// ledger bytes.
type state struct{ digest, ledger string }

// open opens the node at root: the suite drives the node handle.
func open(t *testing.T, root string, o node.Options) *node.Node {
	t.Helper()
	n, err := node.Open(root, o)
	if err != nil {
		t.Fatalf("opening node %s: %v", root, err)
	}
	return n
}

func snap(t *testing.T, root string) state {
	t.Helper()
	a, err := open(t, root, node.Options{}).Verify(context.Background(), node.VerifyOptions{Files: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := os.ReadFile(filepath.Join(root, manifests.LedgerPath))
	if err != nil {
		t.Fatal(err)
	}
	return state{digest: a.TreeDigest, ledger: string(l)}
}

func requireAudit(t *testing.T, root, repoDir string) *schema.Audit {
	t.Helper()
	a, err := open(t, root, node.Options{}).Verify(context.Background(), node.VerifyOptions{Repo: repoDir, Files: true})
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK() {
		t.Fatalf("audit of %s found problems: %+v", root, a.Findings)
	}
	return a
}

func apply(t *testing.T, root string, files ...string) (*node.ApplyReport, error) {
	t.Helper()
	return open(t, root, node.Options{}).Apply(context.Background(), node.Source{Files: files}, node.ApplyOptions{})
}

// Run runs every case of the suite against nodes newNode makes. opts
// shape the fixture's image: a backend that mounts the image passes
// fixture.Squashfs(); the default tar form needs no external tool.
func Run(t *testing.T, newNode Factory, opts ...fixture.Option) {
	if root := os.Getenv(helperRootEnv); root != "" {
		helper(t, root)
		return
	}
	t.Run("Apply", func(t *testing.T) {
		e := newEnv(t, opts)
		root := newNode(t, e.Image)
		before := snap(t, root)
		c := e.Create("1.0.1", e.rich(t))
		if _, err := apply(t, root, c.Path); err != nil {
			t.Fatal(err)
		}
		a := requireAudit(t, root, e.Repo)
		if a.TreeDigest != c.Manifest.TreeDigest || a.TreeDigest == before.digest {
			t.Fatalf("tree digest %s, want the overlay's %s", a.TreeDigest, c.Manifest.TreeDigest)
		}
		got, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf"))
		if err != nil || string(got) != "port 81\n" {
			t.Fatalf("etc/app/app.conf = %q, %v", got, err)
		}
		for _, gone := range []string{"etc/motd", "etc/app/old.d/x", "etc/app/old.d"} {
			if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after its delete: %v", gone, err)
			}
		}
		t.Run("ReapplyIsNoop", func(t *testing.T) {
			mid := snap(t, root)
			rep, err := apply(t, root, c.Path)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Plans) != 1 || !rep.Plans[0].AlreadyApplied {
				t.Fatalf("plans = %+v, want 1.0.1 already applied", rep.Plans)
			}
			if after := snap(t, root); after != mid {
				t.Fatal("a re-apply changed the node")
			}
		})
		t.Run("RollbackIsExact", func(t *testing.T) {
			if _, err := open(t, root, node.Options{}).Rollback(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
			a := requireAudit(t, root, e.Repo)
			if a.TreeDigest != before.digest {
				t.Fatalf("tree digest after rollback %s, want the image's %s", a.TreeDigest, before.digest)
			}
		})
	})
	t.Run("PatchedFile", func(t *testing.T) {
		// A change to a large file ships as a patch against the image's
		// copy, the next as a patch against that; the node rebuilds both
		// from the file it has.
		e := newEnv(t, opts)
		root := newNode(t, e.Image)
		v2 := rootfs["usr/lib/libbig.so"] + "one more line\n"
		v3 := v2[:1000] + "an edit near the start" + v2[1022:]
		c1 := e.Create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/lib/libbig.so", Src: e.HostFile(v2)}}})
		c2 := e.Create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/lib/libbig.so", Src: e.HostFile(v3)}}})
		for _, c := range []*overlay.Created{c1, c2} {
			if len(c.Manifest.Patches) != 1 {
				t.Fatalf("%s ships no patch: %+v", c.Manifest.Version, c.Manifest.Patches)
			}
		}
		if _, err := apply(t, root, c1.Path, c2.Path); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(root, "usr/lib/libbig.so")); err != nil || string(got) != v3 {
			t.Fatalf("usr/lib/libbig.so is not 1.0.2's content (%v)", err)
		}
		requireAudit(t, root, e.Repo)
		// Folded into a fresh image, the first patch's base comes from
		// the image's own tree as it streams by.
		res, err := builder.Regenerate(context.Background(), e.Repo, "", "", filepath.Join(e.Dir, "regen"), builder.WithKey(e.Key))
		if err != nil {
			t.Fatal(err)
		}
		fresh := filepath.Join(t.TempDir(), "fresh")
		if _, err := builder.Provision(context.Background(), res.Image, fresh, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(fresh, "usr/lib/libbig.so")); err != nil || string(got) != v3 {
			t.Fatalf("the regenerated image's usr/lib/libbig.so is not 1.0.2's content (%v)", err)
		}
	})
	t.Run("GapRefusedNodeUntouched", func(t *testing.T) {
		e := newEnv(t, opts)
		root := newNode(t, e.Image)
		e.Create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: e.HostFile("one\n")}}})
		c2 := e.Create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: e.HostFile("two\n")}}})
		before := snap(t, root)
		_, err := apply(t, root, c2.Path)
		if !errors.Is(err, overlay.ErrSequence) || !strings.Contains(err.Error(), "1.0.1") {
			t.Fatalf("apply of 1.0.2 on 1.0.0: %v, want ErrSequence naming the missing 1.0.1", err)
		}
		if after := snap(t, root); after != before {
			t.Fatal("a refused gap changed the node")
		}
		if _, err := open(t, root, node.Options{}).Apply(context.Background(), node.Source{Repo: e.Repo}, node.ApplyOptions{}); err != nil {
			t.Fatalf("catching up from the repository: %v", err)
		}
		if a := requireAudit(t, root, e.Repo); a.Behind != 0 || a.TreeDigest != c2.Manifest.TreeDigest {
			t.Fatalf("after catching up: behind %d, digest %s, want 0 and %s", a.Behind, a.TreeDigest, c2.Manifest.TreeDigest)
		}
	})
	t.Run("TamperedPayloadRefused", func(t *testing.T) {
		e := newEnv(t, opts)
		root := newNode(t, e.Image)
		c := e.Create("1.0.1", e.rich(t))
		bad := filepath.Join(t.TempDir(), "bad.overlay.tar.zst")
		raw, err := os.ReadFile(c.Path)
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)-20] ^= 0xff
		if err := os.WriteFile(bad, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		before := snap(t, root)
		if _, err := apply(t, root, bad); err == nil {
			t.Fatal("a tampered overlay was applied")
		}
		if after := snap(t, root); after != before {
			t.Fatal("a refused overlay changed the node")
		}
	})
	t.Run("AuditFindsTampering", func(t *testing.T) {
		e := newEnv(t, opts)
		root := newNode(t, e.Image)
		c := e.Create("1.0.1", e.rich(t))
		if _, err := apply(t, root, c.Path); err != nil {
			t.Fatal(err)
		}
		at := tamper(t, root, "etc/app/app.conf")
		a, err := open(t, root, node.Options{}).Verify(context.Background(), node.VerifyOptions{Files: true})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range a.Findings {
			found = found || f.Kind == "drift" && f.Path == at
		}
		if a.OK() || !found {
			t.Fatalf("audit after tampering with etc/app/app.conf (at %s): %+v", at, a.Findings)
		}
	})
	t.Run("CrashAtEveryPoint", func(t *testing.T) { crashes(t, newEnv(t, opts), newNode) })
}

// tamper changes the content of rel where the node keeps it: in the
// tree; or, when the tree is read-only, in the top layer directory that
// holds it; or else by flipping a byte of the top layer image. It returns
// the path (relative to root) an audit must name: rel, or the image's.
func tamper(t *testing.T, root, rel string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, rel), []byte("tampered\n"), 0o644); err == nil {
		return rel
	}
	layers := filepath.Join(root, manifests.StateDir, "layers")
	if dirs, _ := filepath.Glob(filepath.Join(layers, "*", rel)); len(dirs) > 0 {
		if err := os.WriteFile(dirs[len(dirs)-1], []byte("tampered\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return rel
	}
	images, _ := filepath.Glob(filepath.Join(layers, "*.erofs"))
	if len(images) == 0 {
		t.Fatalf("cannot tamper with %s: read-only, in no layer directory and no layer image", rel)
	}
	img := images[len(images)-1]
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Rel(root, img)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(out)
}

const (
	helperRootEnv  = "STRATA_CONFORM_ROOT"
	helperOpEnv    = "STRATA_CONFORM_OP"
	helperFilesEnv = "STRATA_CONFORM_FILES"
)

// points are the fault points a backend may have; the suite tries each
// and counts those the backend reached.
func points(nops int) []string {
	out := []string{"layer-written", "switched", "before-ledger", "after-ledger", "restarting"}
	for i := range nops {
		out = append(out, "op-"+itoa(i), "op-"+itoa(i)+"-half")
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// crashes kills an apply and a rollback at every fault point the backend
// reaches, in a helper process, and checks that the next run leaves the
// node at the old or the new head, never a mix, with a clean audit.
func crashes(t *testing.T, e *env, newNode Factory) {
	c := e.Create("1.0.1", e.rich(t))
	nops := len(c.Manifest.Entries) + len(c.Manifest.Deletes)
	fired := map[string]int{}
	for _, op := range []string{"apply", "rollback"} {
		for _, p := range points(min(nops, 10)) {
			root := newNode(t, e.Image)
			base := snap(t, root)
			if op == "rollback" {
				if _, err := apply(t, root, c.Path); err != nil {
					t.Fatal(err)
				}
			}
			before := snap(t, root)
			code, out := runHelper(t, root, p, op, c.Path)
			if code == 0 {
				continue // the backend has no such point on this path
			}
			if code != fault.ExitCode {
				t.Fatalf("%s crashing at %s: helper exited %d:\n%s", op, p, code, out)
			}
			fired[op]++
			// The next run settles the node: an audit must then find
			// either the old head or the new one, exactly.
			if _, err := open(t, root, node.Options{Restarter: restarter.Exec{Template: "true"}}).SettlePending(context.Background()); err != nil {
				t.Fatalf("%s crashed at %s: the next run: %v", op, p, err)
			}
			a := requireAudit(t, root, e.Repo)
			after := snap(t, root)
			switch {
			case op == "apply" && a.TreeDigest == base.digest, op == "apply" && a.TreeDigest == c.Manifest.TreeDigest:
			case op == "rollback" && a.TreeDigest == base.digest, op == "rollback" && a.TreeDigest == before.digest:
			default:
				t.Fatalf("%s crashed at %s: tree %s is neither the old nor the new head", op, p, after.digest)
			}
			// And the node goes on: the apply (again) and a rollback work.
			if _, err := apply(t, root, c.Path); err != nil {
				t.Fatalf("%s crashed at %s: apply afterwards: %v", op, p, err)
			}
			if _, err := open(t, root, node.Options{}).Rollback(context.Background(), ""); err != nil {
				t.Fatalf("%s crashed at %s: rollback afterwards: %v", op, p, err)
			}
			if got := snap(t, root).digest; got != base.digest {
				t.Fatalf("%s crashed at %s: after apply and rollback the tree is %s, want %s", op, p, got, base.digest)
			}
		}
	}
	if fired["apply"] < 3 || fired["rollback"] < 2 {
		t.Fatalf("fault points reached: %v; the backend must have points before and after its commit", fired)
	}
	t.Logf("crashed at %d apply and %d rollback points", fired["apply"], fired["rollback"])
}

var testName = regexp.MustCompile(`[^A-Za-z0-9_/]`)

// runHelper runs op on root in a new process of this test binary that
// exits at point.
func runHelper(t *testing.T, root, point, op string, files ...string) (int, string) {
	t.Helper()
	top := strings.SplitN(t.Name(), "/", 2)[0]
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName.ReplaceAllString(top, "")+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRootEnv+"="+root, helperOpEnv+"="+op,
		helperFilesEnv+"="+strings.Join(files, string(os.PathListSeparator)), fault.Env+"="+point)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("running helper: %v", err)
	}
	return 0, string(out)
}

func helper(t *testing.T, root string) {
	var err error
	switch op := os.Getenv(helperOpEnv); op {
	case "apply":
		files := strings.Split(os.Getenv(helperFilesEnv), string(os.PathListSeparator))
		_, err = open(t, root, node.Options{Restarter: restarter.Exec{Template: "true"}}).Apply(context.Background(), node.Source{Files: files}, node.ApplyOptions{})
	case "rollback":
		_, err = open(t, root, node.Options{}).Rollback(context.Background(), "")
	default:
		t.Fatalf("unknown helper op %q", op)
	}
	if err != nil {
		t.Fatalf("helper %s: %v", os.Getenv(helperOpEnv), err)
	}
}
