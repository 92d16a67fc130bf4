package overlayfs_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
)

// stackOf returns the fstype and source of the top mount at dir.
func stackOf(t *testing.T, dir string) (string, string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fstype, source string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && len(fields) > i+2 && fields[4] == dir {
				fstype, source = fields[i+1], fields[i+2]
			}
		}
	}
	return fstype, source
}

// line is a test line: a signed image built from a recipe and a
// repository started at it.
type line struct {
	dir  string // scratch directory of the test
	key  *sign.Key
	res  *builder.Result
	repo string
}

// newLine builds recipe (with files, relative to the recipe directory,
// laid out first) into an image signed by a new key, and starts a
// repository at it.
func newLine(t *testing.T, recipe string, files map[string]string) *line {
	t.Helper()
	testenv.RequireKernel(t)
	testenv.RequireTools(t, testenv.Squashfs)
	dir := t.TempDir()
	if err := sign.Generate(filepath.Join(dir, "k")); err != nil {
		t.Fatal(err)
	}
	key, err := sign.LoadKey(filepath.Join(dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	rdir := filepath.Join(dir, "recipe")
	if err := os.MkdirAll(filepath.Join(rdir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(rdir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rdir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rdir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := builder.Build(context.Background(), filepath.Join(rdir, "recipe.yaml"), filepath.Join(dir, "img"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	rp := filepath.Join(dir, "repo")
	if _, err := repo.Init(context.Background(), rp, res.Image, key); err != nil {
		t.Fatal(err)
	}
	return &line{dir: dir, key: key, res: res, repo: rp}
}

// A node that boots an image: each overlay is a layer image in the state
// (a deletion a whiteout in it), written as the apply recorded it and
// verifiable with veritysetup, the one the publisher signed into the
// overlay's manifest, /etc and /usr become stacks, the root stays
// read-only, a reboot (everything unmounted, activate again) brings the
// same tree back before anything else runs, and a rollback drops the
// stack when no layer is left.
func TestLayersStacksAndReboot(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc, /usr, /srv]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n  - path: /srv\n    dir: true\n  - path: /usr/share/x\n    content: \"x\\n\"\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app/app.conf": "port 80\n", "rootfs/etc/motd": "hi\n"})
	dir, key, res, rp := l.dir, l.key, l.res, l.repo
	src := filepath.Join(dir, "new.conf")
	if err := os.WriteFile(src, []byte("port 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := overlay.Create(context.Background(), rp, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app/app.conf", Src: src}, {Dest: "/srv/www/index", Src: src}}, Deletes: []string{"/etc/motd"}}, overlay.CreateOptions{Version: "1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	root := newNode(t, res.Image)
	state := filepath.Join(filepath.Dir(root), "state")
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(layersOf(root), "1.0.1.erofs")
	checkImage(t, layer, appliedLayer(t, root, "1.0.1"))
	if signed := c.Manifest.Layer; signed == nil || *signed != *appliedLayer(t, root, "1.0.1") {
		t.Fatalf("the node's layer image %+v is not the one the overlay's manifest signs, %+v", appliedLayer(t, root, "1.0.1"), signed)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(mountedLayer(t, root, "1.0.1"), "etc/motd"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("etc/motd in the layer image: %+v, %v; want a whiteout (char 0/0)", st, err)
	}
	if fstype, source := stackOf(t, filepath.Join(root, "etc")); fstype != "overlay" || source != "strata" {
		t.Fatalf("/etc is %s from %s, want a strata overlay stack", fstype, source)
	}
	if fstype, _ := stackOf(t, filepath.Join(root, "usr")); fstype == "overlay" {
		t.Fatal("/usr is stacked, but no layer touches it")
	}
	// /srv is a hierarchy this image names.
	if fstype, _ := stackOf(t, filepath.Join(root, "srv")); fstype != "overlay" {
		t.Fatalf("/srv is %q, want the stack the image's hierarchies ask for", fstype)
	}
	if _, err := overlay.Create(context.Background(), rp, key, overlay.Change{Adds: []overlay.Add{{Dest: "/opt/x", Src: src}}}, overlay.CreateOptions{Version: "1.0.2"}); !errors.Is(err, overlay.ErrOutsideHierarchies) {
		t.Fatalf("a change to /opt, which this image does not manage: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/app/app.conf"), []byte("x"), 0o644); err == nil {
		t.Fatal("the stacked /etc is writable")
	}
	want := c.Manifest.TreeDigest
	check := func(when string) {
		t.Helper()
		a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{Repo: rp, Files: true})
		if err != nil {
			t.Fatal(err)
		}
		if !a.OK() || a.TreeDigest != want {
			t.Fatalf("%s: audit %+v, digest %s, want %s", when, a.Findings, a.TreeDigest, want)
		}
	}
	check("after apply")
	// Reboot: nothing mounted any more, then the initramfs's steps.
	// A shutdown unmounts /var while /etc and /usr still stand (systemd
	// cannot unmount those): the loop devices under the layer images hold
	// private clones of /var's mount, not /var itself.
	if err := unix.Unmount(filepath.Join(root, "var"), 0); err != nil {
		t.Fatalf("unmounting /var with the layer images stacked: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf")); err != nil || string(b) != "port 81\n" {
		t.Fatalf("etc/app/app.conf with /var unmounted: %q, %v", b, err)
	}
	shutdown(t, root)
	if b, _ := os.ReadFile(filepath.Join(root, "etc/app/app.conf")); len(b) != 0 {
		t.Fatal("the node is still mounted")
	}
	boot(t, res.Image, state, root)
	if b, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf")); err != nil || string(b) != "port 81\n" {
		t.Fatalf("after reboot etc/app/app.conf = %q, %v", b, err)
	}
	check("after reboot")
	// Something mounted below /etc (systemd's transient machine-id is
	// one) stays mounted when /etc loses its last layer.
	sub := filepath.Join(root, "etc/app")
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "marker"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sub, "marker")); err != nil || string(b) != "kept\n" {
		t.Fatalf("the mount below /etc after the rollback: marker %q, %v; it was dropped", b, err)
	}
	if err := unix.Unmount(sub, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf")); err != nil || string(b) != "port 80\n" {
		t.Fatalf("after rollback etc/app/app.conf = %q, %v; want the image's", b, err)
	}
	if _, err := os.Lstat(layer); !os.IsNotExist(err) {
		t.Fatalf("layer 1.0.1 still in the state after its rollback: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "run/strata/layers/*")); len(m) != 0 {
		t.Fatalf("layer images still mounted after the rollback: %v", m)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/motd")); err != nil || string(b) != "hi\n" {
		t.Fatalf("after rollback etc/motd = %q, %v", b, err)
	}
}

// A layers directory replaced by a symlink (planted below the state
// directory) is refused before anything is written or removed through it.
func TestPlantedLayersSymlinkRefused(t *testing.T) {
	l := newLine(t, "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n  - path: /etc/motd\n    content: \"hi\\n\"\n", nil)
	dir, key, res, rp := l.dir, l.key, l.res, l.repo
	src := filepath.Join(dir, "motd")
	if err := os.WriteFile(src, []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := overlay.Create(context.Background(), rp, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	root := newNode(t, res.Image)
	victim := filepath.Join(dir, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	layers := filepath.Join(filepath.Dir(root), "state/var/lib/strata/layers")
	if err := os.Symlink(victim, layers); err != nil {
		t.Fatal(err)
	}
	_, err = nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{})
	if !errors.Is(err, nodestate.ErrBadState) || !strings.Contains(err.Error(), "layers is not a directory (symlink)") {
		t.Fatalf("apply with a planted layers symlink: %v, want a refusal naming it", err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 || ents[0].Name() != "keep" {
		t.Fatalf("the symlink's target was changed: %v", ents)
	}
}

// Deep stacks: forty overlays on /etc stack (one lowerdir+ per layer, not
// one option string), and a node named by a relative path (or through a
// symlink) is the same node: activating it twice mounts the image clone
// once.
func TestDeepStackAndRelativeRoot(t *testing.T) {
	l := newLine(t, "line: deep-line-with-a-long-name\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n  - path: /etc/motd\n    content: \"0\\n\"\n", nil)
	dir, key, res, rp := l.dir, l.key, l.res, l.repo
	root := newNode(t, res.Image)
	const n = 40
	for i := 1; i <= n; i++ {
		src := filepath.Join(dir, "motd")
		if err := os.WriteFile(src, []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := overlay.Create(context.Background(), rp, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: src}}}, overlay.CreateOptions{Version: "1.0." + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
			t.Fatalf("applying layer %d: %v", i, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/motd")); err != nil || string(b) != strconv.Itoa(n)+"\n" {
		t.Fatalf("etc/motd after %d layers = %q, %v", n, b, err)
	}
	a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{Repo: rp, Files: true})
	if err != nil || !a.OK() {
		t.Fatalf("audit after %d layers: %v %+v", n, err, a)
	}
	// The same node, named relatively and through a symlink.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	if err := os.Chdir(filepath.Dir(root)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"root", link} {
		if _, err := nodetest.Activate(context.Background(), name, ""); err != nil {
			t.Fatalf("activate %s: %v", name, err)
		}
	}
	clones := 0
	f, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(f), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == filepath.Join(root, "run/strata/image") {
			clones++
		}
	}
	if clones != 1 {
		t.Fatalf("%d image clones mounted after activating the node by other names, want 1", clones)
	}
	st, err := nodetest.Status(context.Background(), "root")
	if err != nil || st.Active == nil || !*st.Active || len(st.Layers) != n {
		t.Fatalf("status by a relative name: %+v, %v", st, err)
	}
}
