package builder_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// demoRecipe is the repository's demo recipe, relative to this package.
const demoRecipe = "../images/demo/recipe.yaml"

func requireTools(t *testing.T) {
	t.Helper()
	testenv.RequireTools(t, testenv.Squashfs)
}

func testKey(t *testing.T) *sign.Key { return testenv.Key(t) }

func buildDemo(t *testing.T, out string, opts ...builder.Option) *builder.Result {
	t.Helper()
	res, err := builder.Build(context.Background(), demoRecipe, out, opts...)
	if err != nil {
		t.Fatalf("building the demo image: %v", err)
	}
	return res
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readImage streams an image back through sqfs2tar and the tree reader.
func readImage(t *testing.T, image string) ([]manifests.Entry, map[string][]byte) {
	t.Helper()
	rd, err := squashfs.Open(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	tr := tree.NewReader(rd, tree.Limits{})
	var es []manifests.Entry
	contents := map[string][]byte{}
	for {
		e, r, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			rd.Close()
			t.Fatalf("reading %s: %v", image, err)
		}
		if e.Type == manifests.TypeFile {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			e.SHA256 = manifests.Digest(b)[len(manifests.DigestPrefix):]
			contents[e.Path] = b
		}
		es = append(es, e)
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	return es, contents
}

func TestBuildReproducible(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	dir := t.TempDir()
	a := buildDemo(t, filepath.Join(dir, "a"), builder.WithKey(key))
	b := buildDemo(t, filepath.Join(dir, "b"), builder.WithKey(key))

	if filepath.Base(a.Image) != "demo-1.0.0.squashfs" || filepath.Base(a.Manifest) != "demo-1.0.0.image.json" {
		t.Fatalf("build wrote %s and %s", a.Image, a.Manifest)
	}
	if !bytes.Equal(readFile(t, a.Image), readFile(t, b.Image)) {
		t.Fatal("two builds of the same recipe with the same key give different squashfs files")
	}
	ma, mb := readFile(t, a.Manifest), readFile(t, b.Manifest)
	if !bytes.Equal(ma, mb) {
		t.Fatalf("two builds give different manifests:\n%s\n%s", ma, mb)
	}
	if !bytes.Equal(readFile(t, repo.SigPath(a.Manifest)), readFile(t, repo.SigPath(b.Manifest))) {
		t.Fatal("two builds give different manifest signatures")
	}
	if va, vb := readFile(t, repo.VerityPath(a.Image)), readFile(t, repo.VerityPath(b.Image)); !bytes.Equal(va, vb) || a.Verity == nil || a.Verity.RootHash != b.Verity.RootHash {
		t.Fatalf("two builds give different verity records:\n%s\n%s", va, vb)
	}
	if a.Digest != b.Digest || a.Digest != manifests.Digest(ma) {
		t.Fatalf("digests %s, %s; manifest digests to %s", a.Digest, b.Digest, manifests.Digest(ma))
	}
	if !reflect.DeepEqual(a.ManifestData, b.ManifestData) {
		t.Fatal("decoded manifests differ")
	}
	m := a.ManifestData
	if m.Created != "2026-01-01T00:00:00Z" || m.Line != "demo" || m.Version != "1.0.0" || m.Compressor != "zstd" {
		t.Fatalf("manifest header: created %s line %s version %s compressor %s", m.Created, m.Line, m.Version, m.Compressor)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := []string{key.PublicString()}; !reflect.DeepEqual(m.Keys, want) {
		t.Fatalf("manifest keys %v, want %v", m.Keys, want)
	}
	im, err := repo.LoadImage(a.Image, nil)
	if err != nil {
		t.Fatalf("LoadImage: %v", err)
	}
	if im.KeyID != key.ID() {
		t.Fatalf("manifest signed by %s, want %s", im.KeyID, key.ID())
	}

	// Another epoch (SOURCE_DATE_EPOCH) changes the image and its manifest,
	// but not the tree.
	c := buildDemo(t, filepath.Join(dir, "c"), builder.WithKey(key), builder.WithEpoch(1767225601))
	if bytes.Equal(readFile(t, a.Image), readFile(t, c.Image)) {
		t.Fatal("a build with another epoch gives the same squashfs")
	}
	if c.Digest == a.Digest || c.ManifestData.Created != "2026-01-01T00:00:01Z" {
		t.Fatalf("a build with another epoch: digest %s (was %s), created %s", c.Digest, a.Digest, c.ManifestData.Created)
	}
	if c.ManifestData.TreeDigest != m.TreeDigest {
		t.Fatal("the epoch changed the tree digest")
	}
	// The same epoch given explicitly reproduces the recipe's build.
	d := buildDemo(t, filepath.Join(dir, "d"), builder.WithKey(key), builder.WithEpoch(1767225600))
	if !bytes.Equal(readFile(t, a.Image), readFile(t, d.Image)) || d.Digest != a.Digest {
		t.Fatal("WithEpoch(recipe's epoch) does not reproduce the recipe's build")
	}
}

func TestBuildImageContents(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	m := res.ManifestData
	got, contents := readImage(t, res.Image)

	// The image holds exactly the manifest's files plus its own manifest.
	embedded, ok := contents[manifests.ImageManifestPath]
	if !ok {
		t.Fatalf("image lacks /%s", manifests.ImageManifestPath)
	}
	if !bytes.Equal(embedded, readFile(t, res.Manifest)) {
		t.Fatal("embedded manifest differs from the one beside the image")
	}
	var files []manifests.Entry
	for _, e := range got {
		if e.Path != manifests.ImageManifestPath {
			files = append(files, e)
		}
	}
	if !reflect.DeepEqual(files, m.Files) {
		for i := range min(len(files), len(m.Files)) {
			if !reflect.DeepEqual(files[i], m.Files[i]) {
				t.Fatalf("first difference: image %+v, manifest %+v", files[i], m.Files[i])
			}
		}
		t.Fatalf("image has %d entries, manifest %d", len(files), len(m.Files))
	}

	byPath := tree.NewState(got)
	want := []manifests.Entry{
		{Path: "usr/bin/demo-passwd", Type: manifests.TypeFile, Mode: 04755},
		{Path: "usr/bin/demo-web", Type: manifests.TypeFile, Mode: 0755},
		{Path: "etc/demo/secret.token", Type: manifests.TypeFile, Mode: 0600},
		{Path: "etc/demo/web.conf", Type: manifests.TypeFile, Mode: 0644},
		{Path: "var/lib/demo", Type: manifests.TypeDir, Mode: 0750, UID: 1000, GID: 1000},
		{Path: "var/lib", Type: manifests.TypeDir, Mode: 0755},
		{Path: "etc/demo/current", Type: manifests.TypeSymlink, Mode: 0777, Target: "web.conf"},
		{Path: "etc/systemd/system/multi-user.target.wants/demo-web.service", Type: manifests.TypeSymlink, Mode: 0777, Target: "/usr/lib/systemd/system/demo-web.service"},
		{Path: manifests.KeysDir + "/" + key.ID() + ".pub", Type: manifests.TypeFile, Mode: 0644},
	}
	for _, w := range want {
		e, ok := byPath[w.Path]
		if !ok {
			t.Errorf("image lacks %s", w.Path)
			continue
		}
		if e.Type != w.Type || e.Mode != w.Mode || e.UID != w.UID || e.GID != w.GID || e.Target != w.Target {
			t.Errorf("%s: type %s mode %04o owner %d:%d target %q; want %s %04o %d:%d %q",
				w.Path, e.Type, e.Mode, e.UID, e.GID, e.Target, w.Type, w.Mode, w.UID, w.GID, w.Target)
		}
	}
	if got := string(contents["etc/demo/secret.token"]); got != "demo-token-not-a-secret\n" {
		t.Errorf("secret.token = %q", got)
	}
	src := readFile(t, "../images/demo/rootfs/usr/bin/demo-web")
	if !bytes.Equal(contents["usr/bin/demo-passwd"], src) {
		t.Error("demo-passwd does not hold demo-web's bytes")
	}
	if !bytes.Equal(contents[manifests.KeysDir+"/"+key.ID()+".pub"], key.PublicText()) {
		t.Error("baked-in public key differs from the build key")
	}
	// Base files are normalised to root ownership.
	for _, e := range got {
		if e.Path != "var/lib/demo" && (e.UID != 0 || e.GID != 0) {
			t.Errorf("%s owned by %d:%d, want 0:0", e.Path, e.UID, e.GID)
		}
	}
}

func findService(cat manifests.Catalog, unit string) *manifests.Service {
	for i := range cat.Services {
		if cat.Services[i].Unit == unit {
			return &cat.Services[i]
		}
	}
	return nil
}

func TestBuildCatalog(t *testing.T) {
	requireTools(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(testKey(t)))
	cat := res.ManifestData.Catalog
	units := []string{}
	for _, s := range cat.Services {
		units = append(units, s.Unit)
	}
	if !sort.StringsAreSorted(units) {
		t.Errorf("catalog not sorted: %v", units)
	}
	web := findService(cat, "demo-web.service")
	if web == nil {
		t.Fatalf("catalog lacks demo-web.service: %v", units)
	}
	if !slices.Contains(web.ReloadPaths, "etc/demo/web.d") {
		t.Errorf("demo-web.service reload paths %v lack etc/demo/web.d", web.ReloadPaths)
	}
	for _, p := range []string{"etc/demo/web.conf", "usr/share/demo/www"} {
		if !slices.Contains(web.Paths, p) {
			t.Errorf("demo-web.service paths %v lack %s", web.Paths, p)
		}
	}
	if !slices.Contains(web.UnitFiles, "usr/lib/systemd/system/demo-web.service") {
		t.Errorf("demo-web.service unit files %v", web.UnitFiles)
	}
	if !slices.Contains(web.Binaries, "usr/bin/demo-web") {
		t.Errorf("demo-web.service binaries %v lack usr/bin/demo-web", web.Binaries)
	}
	metrics := findService(cat, "demo-metrics.service")
	if metrics == nil {
		t.Fatalf("catalog lacks demo-metrics.service: %v", units)
	}
	if !slices.Contains(metrics.Paths, "etc/demo/metrics.conf") {
		t.Errorf("demo-metrics.service paths %v lack etc/demo/metrics.conf (X-Strata-Paths)", metrics.Paths)
	}
	if worker := findService(cat, "demo-worker.service"); worker == nil || !slices.Contains(worker.Paths, "etc/demo/worker.conf") {
		t.Errorf("demo-worker.service = %+v", worker)
	}
}

// scanNode scans a node's tree without strata's own bookkeeping.
func scanNode(t *testing.T, root string) []manifests.Entry {
	t.Helper()
	es, err := tree.Scan(root, manifests.IsNodeState)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestProvision(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	parent := t.TempDir()
	root := filepath.Join(parent, "node")
	trust, _ := key.PublicKeySet()
	rec, err := builder.Provision(context.Background(), res.Image, root, trust)
	if err != nil {
		t.Fatal(err)
	}
	m := res.ManifestData
	got := scanNode(t, root)
	if d := manifests.TreeDigest(got); d != m.TreeDigest {
		t.Fatalf("provisioned tree digests to %s, manifest says %s", d, m.TreeDigest)
	}
	if !reflect.DeepEqual(got, m.Files) {
		t.Fatal("provisioned tree differs from the manifest's files")
	}
	if !bytes.Equal(readFile(t, filepath.Join(root, manifests.ImageManifestPath)), readFile(t, res.Manifest)) {
		t.Fatal("node's image manifest differs from the signed one")
	}
	fi, err := os.Lstat(filepath.Join(root, "usr/bin/demo-passwd"))
	if err != nil || tree.ModeOf(fi.Mode()) != 04755 {
		t.Fatalf("demo-passwd on the node: %v, %v", fi, err)
	}
	// The ledger names the image.
	l, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 1 {
		t.Fatalf("ledger has %d records", len(l.Entries))
	}
	e := l.Entries[0]
	if e.Action != manifests.LedgerProvision || e.Line != "demo" || e.Version != "1.0.0" || e.Digest != res.Digest ||
		e.Image != "1.0.0" || e.Head != (manifests.Ref{Version: "1.0.0", Digest: res.Digest}) || e.TreeDigest != m.TreeDigest {
		t.Fatalf("ledger record %+v", e)
	}
	if !reflect.DeepEqual(*rec, e) {
		t.Fatalf("Provision returned %+v, ledger holds %+v", *rec, e)
	}
	if names := dirNames(t, parent); !reflect.DeepEqual(names, []string{"node"}) {
		t.Fatalf("provisioning left %v in the parent directory", names)
	}

	// Provisioning into an existing empty directory works; nil trust
	// checks against the keys the image lists.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Provision(context.Background(), res.Image, empty, nil); err != nil {
		t.Fatalf("provisioning into an empty directory: %v", err)
	}
	if d := manifests.TreeDigest(scanNode(t, empty)); d != m.TreeDigest {
		t.Fatalf("second node digests to %s", d)
	}
}

func TestProvisionRefusals(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	res := buildDemo(t, filepath.Join(t.TempDir(), "good"), builder.WithKey(key))
	trust, _ := key.PublicKeySet()
	ctx := context.Background()

	// copyImage copies the image, manifest and signature to a fresh dir.
	copyImage := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		img := filepath.Join(dir, filepath.Base(res.Image))
		for _, p := range [][2]string{{res.Image, img}, {res.Manifest, repo.ManifestPath(img)}, {repo.SigPath(res.Manifest), repo.SigPath(repo.ManifestPath(img))}} {
			if err := os.WriteFile(p[1], readFile(t, p[0]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return img
	}
	// provisionFails checks that provisioning fails and leaves nothing.
	provisionFails := func(t *testing.T, img string, target error) error {
		t.Helper()
		parent := t.TempDir()
		root := filepath.Join(parent, "node")
		_, err := builder.Provision(ctx, img, root, trust)
		if err == nil {
			t.Fatal("Provision succeeded")
		}
		if target != nil && !errors.Is(err, target) {
			t.Errorf("Provision = %v, want %v", err, target)
		}
		if names := dirNames(t, parent); len(names) != 0 {
			t.Errorf("failed Provision left %v behind", names)
		}
		// An existing empty target stays, empty.
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := builder.Provision(ctx, img, root, trust); err == nil {
			t.Fatal("Provision into an empty dir succeeded")
		}
		if names := dirNames(t, parent); !reflect.DeepEqual(names, []string{"node"}) {
			t.Errorf("failed Provision left %v behind", names)
		}
		if names := dirNames(t, root); len(names) != 0 {
			t.Errorf("failed Provision wrote %v into the target", names)
		}
		return err
	}

	t.Run("non-empty dir", func(t *testing.T) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "keep"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := builder.Provision(ctx, res.Image, root, trust); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("Provision into a non-empty dir = %v", err)
		}
		if names := dirNames(t, root); !reflect.DeepEqual(names, []string{"keep"}) {
			t.Fatalf("target now holds %v", names)
		}
		if names := dirNames(t, filepath.Dir(root)); !reflect.DeepEqual(names, []string{filepath.Base(root)}) {
			t.Fatalf("parent now holds %v", names)
		}
	})

	t.Run("untrusted key", func(t *testing.T) {
		other, _ := testKey(t).PublicKeySet()
		root := filepath.Join(t.TempDir(), "node")
		if _, err := builder.Provision(ctx, res.Image, root, other); !errors.Is(err, sign.ErrBadSignature) {
			t.Fatalf("Provision with another trust set = %v, want ErrBadSignature", err)
		}
	})

	t.Run("manifest byte flipped", func(t *testing.T) {
		raw := readFile(t, res.Manifest)
		// Flip a byte in every region of the manifest: each must fail.
		for _, off := range []int{0, len(raw) / 3, len(raw) / 2, len(raw) - 2} {
			img := copyImage(t)
			b := append([]byte(nil), raw...)
			b[off] ^= 0x01
			if err := os.WriteFile(repo.ManifestPath(img), b, 0o644); err != nil {
				t.Fatal(err)
			}
			provisionFails(t, img, nil)
		}
		// A change that keeps the manifest valid fails the signature.
		img := copyImage(t)
		b := bytes.Replace(raw, []byte(`"created": "2026-01-01T00:00:00Z"`), []byte(`"created": "2026-01-01T00:00:01Z"`), 1)
		if bytes.Equal(b, raw) {
			t.Fatal("test manifest has no created field to alter")
		}
		if err := os.WriteFile(repo.ManifestPath(img), b, 0o644); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, sign.ErrBadSignature)
	})

	t.Run("signature removed", func(t *testing.T) {
		img := copyImage(t)
		if err := os.Remove(repo.SigPath(repo.ManifestPath(img))); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, sign.ErrUnsigned)
	})

	t.Run("squashfs swapped", func(t *testing.T) {
		// The same recipe at another epoch: same files, other manifest.
		other := buildDemo(t, t.TempDir(), builder.WithKey(key), builder.WithEpoch(1767225601))
		img := copyImage(t)
		if err := os.WriteFile(img, readFile(t, other.Image), 0o644); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, builder.ErrImageMismatch)

		// A different image of the same line and version.
		rdir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(rdir, "rootfs/etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rdir, "rootfs/etc/hostname"), []byte("evil\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := writeRecipe(t, rdir, "line: demo\nversion: 1.0.0\nepoch: 1767225600\nbase:\n  dir: rootfs\n")
		small, err := builder.Build(ctx, p, filepath.Join(rdir, "out"), builder.WithKey(key))
		if err != nil {
			t.Fatal(err)
		}
		img = copyImage(t)
		if err := os.WriteFile(img, readFile(t, small.Image), 0o644); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, builder.ErrImageMismatch)
	})

	t.Run("squashfs corrupted", func(t *testing.T) {
		img := copyImage(t)
		b := readFile(t, img)
		for i := len(b) / 4; i < len(b)/2; i++ {
			b[i] ^= 0xff
		}
		if err := os.WriteFile(img, b, 0o644); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, nil)
	})

	t.Run("squashfs missing", func(t *testing.T) {
		img := copyImage(t)
		if err := os.Remove(img); err != nil {
			t.Fatal(err)
		}
		provisionFails(t, img, nil)
	})
}

func TestBuildUnsignedAndErrors(t *testing.T) {
	requireTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	res := buildDemo(t, filepath.Join(dir, "out"))
	if _, err := os.Stat(repo.SigPath(res.Manifest)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unsigned build wrote a signature: %v", err)
	}
	if len(res.ManifestData.Keys) != 0 {
		t.Fatalf("unsigned build trusts %v", res.ManifestData.Keys)
	}
	if _, err := builder.Provision(ctx, res.Image, filepath.Join(dir, "node"), nil); !errors.Is(err, sign.ErrUnsigned) && !errors.Is(err, sign.ErrNoKeys) {
		t.Fatalf("provisioning an unsigned image = %v", err)
	}

	// Recipe steps that cannot apply fail the build and write nothing.
	rdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rdir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rdir, "rootfs/etc/file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"mode for missing path": "files:\n  - path: /etc/nothing\n    mode: \"0600\"\n",
		"remove missing path":   "remove: [/etc/nothing]\n",
		"parent is a file":      "files:\n  - path: /etc/file/x\n    content: x\n",
	}
	for name, steps := range bad {
		out := filepath.Join(rdir, "out-"+strings.ReplaceAll(name, " ", "-"))
		p := writeRecipe(t, rdir, "line: t\nversion: 1.0.0\nbase:\n  dir: rootfs\n"+steps)
		if _, err := builder.Build(ctx, p, out); err == nil {
			t.Errorf("%s: Build succeeded", name)
		}
		if _, err := os.Stat(filepath.Join(out, "t-1.0.0.squashfs")); err == nil {
			t.Errorf("%s: failed build left an image", name)
		}
	}
}

// A files step whose src is a symlink to a regular file: the step is
// checked with os.Stat (following the link), so the build must either place
// the target's bytes or refuse the recipe; it must not produce a manifest
// entry with no hash.
func TestBuildSrcSymlink(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "real"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	p := writeRecipe(t, dir, "line: t\nversion: 1.0.0\nbase:\n  dir: rootfs\nfiles:\n  - path: /etc/x\n    src: link\n")
	res, err := builder.Build(context.Background(), p, filepath.Join(dir, "out"))
	if err != nil {
		if !errors.Is(err, builder.ErrRecipe) {
			t.Fatalf("Build with a symlink src = %v, want success or ErrRecipe", err)
		}
		return
	}
	_, contents := readImage(t, res.Image)
	if got := string(contents["etc/x"]); got != "hi\n" {
		t.Fatalf("/etc/x = %q, want the link target's content", got)
	}
}
