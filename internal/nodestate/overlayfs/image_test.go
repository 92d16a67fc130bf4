package overlayfs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/dmverity"
	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nodestate/overlayfs"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// layersOf is the layers directory of the test node at root (its state
// beside it).
func layersOf(root string) string {
	return filepath.Join(filepath.Dir(root), "state", "var", manifests.StateDir[len("var/"):], "layers")
}

// appliedLayer returns what the ledger of the node at root recorded of
// version's layer image.
func appliedLayer(t *testing.T, root, version string) *manifests.LayerImage {
	t.Helper()
	l, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Applied() {
		if e.Version == version && e.Layer != nil {
			return e.Layer
		}
	}
	t.Fatalf("the ledger records no layer image of %s", version)
	return nil
}

// mountedLayer returns where version's layer image is mounted below the
// node's /run.
func mountedLayer(t *testing.T, root, version string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root, "run/strata/layers", version+"-*"))
	if len(m) != 1 {
		t.Fatalf("mounts of layer %s: %v, want one", version, m)
	}
	return m[0]
}

// checkImage checks the layer image at path against its record: its
// size and digest, and its dm-verity tree with veritysetup, given the
// record's values alone.
func checkImage(t *testing.T, path string, li *manifests.LayerImage) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != li.SHA256 || int64(len(raw)) != li.Size {
		t.Fatalf("%s: %d bytes, sha256 %x; the ledger says %d, %s", path, len(raw), sum, li.Size, li.SHA256)
	}
	if out, err := exec.Command("veritysetup", "verify", path, path, li.RootHash, "--no-superblock",
		"--data-blocks="+strconv.FormatInt(li.DataBlocks, 10), "--hash-offset="+strconv.FormatInt(li.DataBlocks*manifests.VerityBlockSize, 10),
		"--salt="+li.Salt).CombinedOutput(); err != nil {
		t.Fatalf("veritysetup verify %s: %v\n%s", path, err, out)
	}
	// What a node with device-mapper maps (kernel-verified mode) is
	// built from the record the same way.
	p, root, err := layer.Verity(li)
	if err != nil {
		t.Fatal(err)
	}
	if err := dmverity.Verify(context.Background(), dmverity.Target{Device: path, Params: p, Root: root}); err != nil {
		t.Fatalf("the mapping a kernel-verified node makes of %s: %v", path, err)
	}
}

// flip changes one byte of the file at path, at offset off.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// shutdown unmounts the node at root as a shutdown does: every mount
// below it, the last mounted first (so a layer image goes before the /var
// that holds its file), trying again while a loop device still holds its
// file (the kernel detaches it asynchronously after the last unmount).
func shutdown(t *testing.T, root string) {
	t.Helper()
	for range 100 {
		raw, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var points []string
		for _, ln := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(ln); len(f) > 4 && (f[4] == root || strings.HasPrefix(f[4], root+"/")) {
				points = append(points, f[4])
			}
		}
		if len(points) == 0 {
			return
		}
		for _, p := range slices.Backward(points) {
			if err := unix.Unmount(p, 0); err != nil && err != unix.EBUSY && err != unix.EINVAL {
				t.Fatalf("unmounting %s: %v", p, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the node at %s is still mounted", root)
}

// toLayerDirs turns the node at root (booted from image) into one whose
// layers are directories, as strata wrote them before layer images: each
// mounted image's tree copied to layers/<version>, the ledger's records
// of the images dropped, the images removed, and the node rebooted.
func toLayerDirs(t *testing.T, image, root string) {
	t.Helper()
	n := nodestate.Node{Root: root}
	l, err := n.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, e := range l.Entries {
		if e.Layer != nil {
			dir := filepath.Join(layersOf(root), e.Version)
			if out, err := exec.Command("cp", "-a", mountedLayer(t, root, e.Version), dir).CombinedOutput(); err != nil {
				t.Fatalf("copying layer %s: %v: %s", e.Version, err, out)
			}
			images = append(images, filepath.Join(layersOf(root), e.Version+".erofs"))
		}
	}
	rewriteLedger(t, root, func(e *manifests.LedgerEntry) { e.Layer = nil })
	shutdown(t, root)
	for _, p := range images {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	boot(t, image, filepath.Join(filepath.Dir(root), "state"), root)
}

// lineWithOverlay is a line whose image has /etc/app.conf, and its
// overlay 1.0.1 changing that file.
func lineWithOverlay(t *testing.T) (*line, *overlay.Created) {
	t.Helper()
	l := newLine(t, "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n", map[string]string{"rootfs/etc/app.conf": "port 80\n"})
	src := filepath.Join(l.dir, "c")
	if err := os.WriteFile(src, []byte("port 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := overlay.Create(context.Background(), l.repo, l.key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app.conf", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// An overlay whose signed manifest records another layer image than the
// one the node writes (the tree below it is not the line's, or the
// record lies) is refused before anything switches: no layer, no mount,
// no ledger record.
func TestSignedLayerRecordMismatchRefused(t *testing.T) {
	l, c := lineWithOverlay(t)
	ctx := context.Background()
	members := archivetest.Read(t, c.Path)[2:] // the payload, after the manifest and its signature
	m := *c.Manifest
	li := *m.Layer
	li.RootHash = strings.Repeat("0", 64)
	m.Layer = &li
	forged := filepath.Join(l.dir, "forged.overlay.tar.zst")
	archivetest.Craft(t, forged, &m, l.key, members)
	root := newNode(t, l.res.Image)
	_, err := nodetest.Apply(ctx, root, node.Source{Files: []string{forged}}, node.ApplyOptions{}, node.Options{})
	if !errors.Is(err, nodestate.ErrDrift) || !strings.Contains(err.Error(), "signed manifest records") {
		t.Fatalf("apply of an overlay whose signed layer record differs: %v, want ErrDrift naming the record", err)
	}
	if ents, _ := os.ReadDir(layersOf(root)); len(ents) != 0 {
		t.Errorf("layers left by the refused apply: %v", ents)
	}
	if st, err := nodetest.Status(ctx, root); err != nil || st.Head.Version != "1.0.0" {
		t.Fatalf("status after the refused apply: %+v, %v", st, err)
	}
	// The genuine overlay applies, and its image is the signed one.
	if _, err := nodetest.Apply(ctx, root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := appliedLayer(t, root, "1.0.1"); *got != *c.Manifest.Layer {
		t.Fatalf("layer image %+v, signed %+v", got, c.Manifest.Layer)
	}
	// A ledger rewritten to record another image is named by the audit:
	// the signed manifest says which image the overlay makes.
	rewriteLedger(t, root, func(e *manifests.LedgerEntry) {
		if e.Layer != nil {
			li := *e.Layer
			li.SHA256 = strings.Repeat("f", 64)
			e.Layer = &li
		}
	})
	a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Files: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range a.Findings {
		found = found || f.Kind == "tampered" && f.Path == manifests.StateDir+"/layers/1.0.1.erofs" && strings.Contains(f.Message, "signed manifest")
	}
	if !found {
		t.Fatalf("audit with the ledger's layer record rewritten: %+v", a.Findings)
	}
}

// An overlay whose signed manifest records no layer image (made before
// strata recorded them) applies, and the node says that its image is
// checked against the ledger's record alone: status (LayerIntegrity)
// names it after the apply and after the next boot's activation, until
// a rollback drops it.
func TestUnsignedLayerReported(t *testing.T) {
	l, c := lineWithOverlay(t)
	ctx := context.Background()
	members := archivetest.Read(t, c.Path)[2:]
	m := *c.Manifest
	m.Layer = nil
	legacy := filepath.Join(l.dir, "legacy.overlay.tar.zst")
	archivetest.Craft(t, legacy, &m, l.key, members)
	root := newNode(t, l.res.Image)
	if _, err := nodetest.Apply(ctx, root, node.Source{Files: []string{legacy}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if li := st.LayerIntegrity; li == nil || !slices.Equal(li.Unsigned, []string{"1.0.1"}) || li.Refused != nil {
		t.Fatalf("status after a layer no signature covers: %+v", st.LayerIntegrity)
	}
	// The next boot's activation finds it again (its /run is new).
	shutdown(t, root)
	if rep := bootReport(t, l.res.Image, filepath.Join(filepath.Dir(root), "state"), root); len(rep.Layers) != 1 || rep.LayerRefused != nil {
		t.Fatalf("activation with a layer no signature covers: %+v", rep)
	}
	if st, err = nodetest.Status(ctx, root); err != nil || st.LayerIntegrity == nil || !slices.Equal(st.LayerIntegrity.Unsigned, []string{"1.0.1"}) {
		t.Fatalf("status after the next boot: %+v, %v", st.LayerIntegrity, err)
	}
	// Rolled back, the record goes with the layer.
	if _, err := nodetest.Rollback(ctx, root, "", node.Options{}); err != nil {
		t.Fatal(err)
	}
	if st, err = nodetest.Status(ctx, root); err != nil || st.LayerIntegrity == nil || len(st.LayerIntegrity.Unsigned) != 0 {
		t.Fatalf("status after the rollback: %+v, %v", st.LayerIntegrity, err)
	}
}

// rewriteLedger rewrites the ledger of the node at root as root on the
// node could: every record changed by edit, the hash chain made anew.
func rewriteLedger(t *testing.T, root string, edit func(*manifests.LedgerEntry)) {
	t.Helper()
	n := nodestate.Node{Root: root}
	l, err := n.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	out := &manifests.Ledger{Schema: l.Schema, Kind: l.Kind}
	for _, e := range l.Entries {
		edit(&e)
		if err := out.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.WriteLedger(out); err != nil {
		t.Fatal(err)
	}
}

// Root on a node can write a layer image and the ledger's record of it
// so that they agree: activation then checks the record against the
// overlay's stored manifest, signed by a key the image (not the state
// partition) trusts, and refuses the layer and everything above it.
func TestForgedLayerRecordRefusedAtActivation(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc, /usr]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app.conf": "port 80\n"})
	ctx := context.Background()
	for _, v := range []string{"1.0.1", "1.0.2"} {
		src := filepath.Join(l.dir, v)
		if err := os.WriteFile(src, []byte("port "+v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := overlay.Create(ctx, l.repo, l.key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app.conf", Src: src}}}, overlay.CreateOptions{Version: v}); err != nil {
			t.Fatal(err)
		}
	}
	root := newNode(t, l.res.Image)
	state := filepath.Join(filepath.Dir(root), "state")
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	conf := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "etc/app.conf"))
		return string(b)
	}
	img1, img2 := filepath.Join(layersOf(root), "1.0.1.erofs"), filepath.Join(layersOf(root), "1.0.2.erofs")
	li2 := *appliedLayer(t, root, "1.0.2")
	raw2, err := os.ReadFile(img2)
	if err != nil {
		t.Fatal(err)
	}
	// 1.0.2's genuine image planted as 1.0.1's, and the ledger's record
	// of 1.0.1 made to match it: the digest check alone passes.
	shutdown(t, root)
	// Node state is below state/var while the node is down.
	if err := os.WriteFile(img1, raw2, 0o600); err != nil {
		t.Fatal(err)
	}
	rewriteLedger(t, state, func(e *manifests.LedgerEntry) {
		if e.Version == "1.0.1" {
			e.Layer = &li2
		}
	})
	rep := bootReport(t, l.res.Image, state, root)
	if rep.LayerRefused == nil || rep.LayerRefused.Version != "1.0.1" || len(rep.Layers) != 0 ||
		!strings.Contains(rep.LayerRefused.Error, "its signed manifest") || !strings.Contains(rep.LayerRefused.Error, "verify-sequence --pub") {
		t.Fatalf("activation with 1.0.1's image and record forged: %+v", rep)
	}
	if got := conf(); got != "port 80\n" {
		t.Fatalf("app.conf with 1.0.1 refused: %q, want the image's", got)
	}
	st, err := nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if li := st.LayerIntegrity; li == nil || li.Refused == nil || li.Refused.Version != "1.0.1" || li.Refused.Cause != schema.RefusedRecord {
		t.Fatalf("status: %+v", st.LayerIntegrity)
	}

	// The stored manifest forged too, to record the planted image,
	// signed by a key the image does not trust.
	shutdown(t, root)
	stored := filepath.Join(state, manifests.StateDir, "overlays", "1.0.1.json")
	raw, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}
	var m manifests.OverlayManifest
	if err := manifests.Decode(raw, &m); err != nil {
		t.Fatal(err)
	}
	m.Layer = &li2
	forged, err := manifests.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	other, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stored, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stored+".minisig", other.Sign(forged, sign.OverlayComment("l", "1.0.1")), 0o644); err != nil {
		t.Fatal(err)
	}
	rewriteLedger(t, state, func(e *manifests.LedgerEntry) {
		if e.Version == "1.0.1" {
			e.Digest = manifests.Digest(forged)
		}
	})
	rep = bootReport(t, l.res.Image, state, root)
	if rep.LayerRefused == nil || rep.LayerRefused.Version != "1.0.1" || len(rep.Layers) != 0 ||
		!strings.Contains(rep.LayerRefused.Error, "not trusted") {
		t.Fatalf("activation with 1.0.1's manifest re-signed by another key: %+v", rep)
	}
	if got := conf(); got != "port 80\n" {
		t.Fatalf("app.conf with 1.0.1 refused: %q, want the image's", got)
	}
}

// The layer image an apply has just written and checked is mounted
// without hashing it again, while it is the file written, unchanged;
// the audit's open hashes it even then. An image put in its place
// between the write and the mount (another inode), or changed in place
// (the same inode), is hashed at the mount and refused, and the node
// stays where it was.
func TestFreshLayerImageHashedOnce(t *testing.T) {
	l, c := lineWithOverlay(t)
	ctx := context.Background()
	n := overlayfs.CountDigests(t)
	root := newNode(t, l.res.Image)
	overlayfs.OnStaged(t, func(_ string, open func(bool) error) {
		if err := open(false); err != nil || n.Load() != 1 {
			t.Errorf("the audit's open of the kept image: %v, %d hash(es), want 1", err, n.Load())
		}
		if err := open(true); err != nil || n.Load() != 1 {
			t.Errorf("a mount's open of the kept image: %v, %d hash(es), want still 1", err, n.Load())
		}
	})
	if _, err := nodetest.Apply(ctx, root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("the apply's switch hashed the layer image it had just written %d more time(s)", got-1)
	}

	for name, change := range map[string]func(t *testing.T, p string){
		"swapped": func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[0] ^= 1
			if err := os.WriteFile(p+".x", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p+".x", p); err != nil {
				t.Fatal(err)
			}
		},
		"changed in place": func(t *testing.T, p string) { flip(t, p, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			root := newNode(t, l.res.Image)
			overlayfs.OnStaged(t, func(p string, _ func(bool) error) { change(t, p) })
			_, err := nodetest.Apply(ctx, root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{})
			if !errors.Is(err, overlayfs.ErrLayerRefused) || !strings.Contains(err.Error(), "sha256") {
				t.Fatalf("apply with the image %s before its mount: %v, want ErrLayerRefused naming the digest", name, err)
			}
			if st, err := nodetest.Status(ctx, root); err != nil || st.Head.Version != "1.0.0" {
				t.Fatalf("status after the refused apply: %+v, %v", st, err)
			}
		})
	}
}
