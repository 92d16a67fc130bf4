package overlay_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/patch"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// library returns n bytes that compress about as well as a shared
// library does: text-like runs mixed with random bytes.
func library(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(12))
		if r.IntN(3) == 0 {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestPatchedOverlays follows one large file through a line: added whole,
// then changed twice (each change a patch, the second against content the
// first patch rebuilt), applied on a node, audited, and folded into a
// regenerated image. It runs on both image forms: the real squashfs one
// proves that bases read from the image (rdsquashfs) and the fold
// (sqfs2tar, mksquashfs) work with the real tools.
func TestPatchedOverlays(t *testing.T) {
	t.Run("tar", func(t *testing.T) { patchedOverlays(t) })
	t.Run("squashfs", func(t *testing.T) { patchedOverlays(t, fixture.Squashfs()) })
}

func patchedOverlays(t *testing.T, opts ...fixture.Option) {
	ctx := context.Background()
	f := fixture.New(t, opts...)
	const dest = "/usr/lib/libbig.so"
	v1 := library(1, 400<<10)
	v2 := append(append([]byte(nil), v1...), 'x') // one byte appended
	v3 := append([]byte(nil), v2...)
	copy(v3[200<<10:], "an edit in the middle of the file")
	c1 := f.Create("1.0.1", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v1))}}})
	c2 := f.Create("1.0.2", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v2))}}})
	c3 := f.Create("1.0.3", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v3))}}})
	if len(c1.Manifest.Patches) != 0 {
		t.Fatalf("a new file shipped as a patch: %+v", c1.Manifest.Patches)
	}
	for _, c := range []*Created{c2, c3} {
		ps := c.Manifest.Patches
		if len(ps) != 1 || ps[0].Path != strings.TrimPrefix(dest, "/") {
			t.Fatalf("%s: patches %+v, want one for %s", c.Manifest.Version, ps, dest)
		}
		// The whole overlay is a fraction of the file compressed alone.
		if whole, got := int64(patch.Compressed(v2)), fileSize(t, c.Path); got*20 > whole {
			t.Errorf("%s is %d bytes; the file compressed alone is %d", c.Manifest.Version, got, whole)
		}
	}
	if c3.Manifest.Patches[0].Base != c2.Manifest.Entries[len(c2.Manifest.Entries)-1].SHA256 {
		t.Errorf("1.0.3's patch is not made against 1.0.2's content")
	}

	root := f.Provision()
	if _, err := apply(root, c1.Path, c2.Path, c3.Path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, dest))
	if err != nil || !bytes.Equal(got, v3) {
		t.Fatalf("the node's %s is not the content of 1.0.3 (%v)", dest, err)
	}
	if a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: f.Repo, Files: true}); err != nil || !a.OK() {
		t.Fatalf("verify: %v %+v", err, a)
	}

	// The regenerated image carries the rebuilt file, and a node
	// provisioned from it is at the head.
	res, err := builder.Regenerate(ctx, f.Repo, "", "", filepath.Join(f.Dir, "regen"), builder.WithKey(f.Key))
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "node")
	if _, err := builder.Provision(ctx, res.Image, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(fresh, dest)); err != nil || !bytes.Equal(got, v3) {
		t.Fatalf("the regenerated image's %s is not the head's (%v)", dest, err)
	}
	if res.ManifestData.TreeDigest != c3.Manifest.TreeDigest {
		t.Errorf("regenerated tree %s, head %s", res.ManifestData.TreeDigest, c3.Manifest.TreeDigest)
	}

	// A small file made large is not patched: a 5-byte base shares
	// nothing worth a patch (patches against files of the image itself
	// are the conformance suite's PatchedFile).
	c4 := f.Create("1.0.4", Change{Adds: []Add{{Dest: "/usr/share/doc/readme", Src: f.HostFile(string(append(library(2, 100<<10), "docs\n"...)))}}})
	if len(c4.Manifest.Patches) != 0 {
		t.Fatalf("a 5-byte file was patched into 100 KiB: %+v", c4.Manifest.Patches)
	}
}

// TestPatchAgainstDriftedFile: a node whose copy of the file drifted
// cannot rebuild it; the apply says so and changes nothing.
func TestPatchAgainstDriftedFile(t *testing.T) {
	f := fixture.New(t)
	const dest = "/usr/lib/libbig.so"
	v1 := library(3, 300<<10)
	c1 := f.Create("1.0.1", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v1))}}})
	c2 := f.Create("1.0.2", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(append(append([]byte(nil), v1...), "more"...)))}}})
	if len(c2.Manifest.Patches) != 1 {
		t.Fatalf("no patch: %+v", c2.Manifest.Patches)
	}
	root := f.Provision()
	if _, err := apply(root, c1.Path); err != nil {
		t.Fatal(err)
	}
	drifted := append([]byte(nil), v1...)
	drifted[10] ^= 1
	if err := os.WriteFile(filepath.Join(root, dest), drifted, 0o644); err != nil {
		t.Fatal(err)
	}
	before := fixture.Snap(t, root)
	// The drifted file is a local edit the apply would replace: refused
	// as such. Forced, the patch still cannot be built on it.
	if _, err := apply(root, c2.Path); !errors.Is(err, node.ErrLocalEdit) || !strings.Contains(err.Error(), dest) {
		t.Fatalf("apply onto a drifted file = %v, want node.ErrLocalEdit naming %s", err, dest)
	}
	fixture.AssertUnchanged(t, root, before)
	_, err := applyForce(root, c2.Path)
	if !errors.Is(err, ErrNoBase) || !strings.Contains(err.Error(), "drifted") || !strings.Contains(err.Error(), dest) {
		t.Fatalf("apply onto a drifted file = %v, want ErrNoBase naming %s", err, dest)
	}
	if !errors.Is(err, manifests.ErrRejected) {
		t.Errorf("not a rejection (exit 3): %v", err)
	}
	fixture.AssertUnchanged(t, root, before)
	// A planted symlink in its place is not followed either.
	if err := os.Remove(filepath.Join(root, dest)); err != nil {
		t.Fatal(err)
	}
	outside := f.HostFile(string(v1)) // the right content, but outside the root
	if err := os.Symlink(outside, filepath.Join(root, dest)); err != nil {
		t.Fatal(err)
	}
	before = fixture.Snap(t, root)
	if _, err := apply(root, c2.Path); !errors.Is(err, node.ErrLocalEdit) {
		t.Fatalf("apply over a planted link = %v, want node.ErrLocalEdit", err)
	}
	if _, err := applyForce(root, c2.Path); !errors.Is(err, ErrNoBase) {
		t.Fatalf("apply through a planted link = %v, want ErrNoBase", err)
	}
	fixture.AssertUnchanged(t, root, before)
}

// TestCraftedPatchesRefused feeds a node signed overlays whose patches
// lie: each is refused and the node is unchanged.
func TestCraftedPatchesRefused(t *testing.T) {
	f := fixture.New(t)
	const rel = "usr/lib/libbig.so"
	v1 := library(4, 300<<10)
	c1 := f.Create("1.0.1", Change{Adds: []Add{{Dest: "/" + rel, Src: f.HostFile(string(v1))}}})
	root := f.Provision()
	if _, err := apply(root, c1.Path); err != nil {
		t.Fatal(err)
	}
	v2 := append(append([]byte(nil), v1...), "next"...)
	good, err := patch.Make(v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	other, err := patch.Make(v1, append(append([]byte(nil), v1...), "else"...))
	if err != nil {
		t.Fatal(err)
	}
	entry := manifests.Entry{Path: rel, Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(v2)), SHA256: sha(v2)}
	for _, tc := range []struct {
		name  string
		patch manifests.Patch
		data  []byte
		want  error
	}{
		{"member is not the named patch", manifests.Patch{Path: rel, Base: sha(v1), Size: int64(len(good)), SHA256: sha(good)}, flipByte(good), ErrPayload},
		{"patch rebuilds other content", manifests.Patch{Path: rel, Base: sha(v1), Size: int64(len(other)), SHA256: sha(other)}, other, ErrPayload},
		{"base is not the node's content", manifests.Patch{Path: rel, Base: sha(v2), Size: int64(len(good)), SHA256: sha(good)}, good, ErrNoBase},
		{"member longer than the patch", manifests.Patch{Path: rel, Base: sha(v1), Size: int64(len(good)), SHA256: sha(good)}, append(append([]byte(nil), good...), 0), ErrPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fixture.HeadManifest(t, root, "1.0.2", []manifests.Entry{entry}, nil)
			m.Patches = []manifests.Patch{tc.patch}
			p := filepath.Join(t.TempDir(), "bad.overlay.tar.zst")
			me := entry
			me.Size = int64(len(tc.data))
			craft(t, p, m, f.Key, []member{fixture.FileMember(me, tc.data)})
			before := fixture.Snap(t, root)
			_, err := apply(root, p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("apply = %v, want %v", err, tc.want)
			}
			t.Log(err)
			fixture.AssertUnchanged(t, root, before)
		})
	}
	// The honest version of the same overlay applies.
	m := fixture.HeadManifest(t, root, "1.0.2", []manifests.Entry{entry}, nil)
	m.Patches = []manifests.Patch{{Path: rel, Base: sha(v1), Size: int64(len(good)), SHA256: sha(good)}}
	p := filepath.Join(t.TempDir(), "good.overlay.tar.zst")
	me := entry
	me.Size = int64(len(good))
	craft(t, p, m, f.Key, []member{fixture.FileMember(me, good)})
	a, err := Open(p, sign.AnyKey())
	if err == nil {
		err = a.Verify(context.Background())
	}
	if err == nil {
		_, err = apply(root, p)
	}
	if err != nil {
		t.Fatalf("the honest crafted overlay: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, rel)); !bytes.Equal(got, v2) {
		t.Fatal("rebuilt content differs")
	}
}

func flipByte(b []byte) []byte {
	c := append([]byte(nil), b...)
	c[len(c)/2] ^= 0x55
	return c
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestPatchInBatchChecksBaseFirst: a batch whose second overlay patches a
// file that drifted on the node is refused before the first one commits.
func TestPatchInBatchChecksBaseFirst(t *testing.T) {
	f := fixture.New(t)
	const dest = "/usr/lib/libbig.so"
	v1 := library(5, 300<<10)
	c1 := f.Create("1.0.1", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v1))}}})
	c2 := f.Create("1.0.2", f.Change("/etc/motd", "unrelated\n"))
	c3 := f.Create("1.0.3", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(append(append([]byte(nil), v1...), "tail"...)))}}})
	if len(c3.Manifest.Patches) != 1 {
		t.Fatalf("no patch: %+v", c3.Manifest.Patches)
	}
	root := f.Provision()
	if _, err := apply(root, c1.Path); err != nil {
		t.Fatal(err)
	}
	drifted := append([]byte(nil), v1...)
	drifted[100] ^= 1
	if err := os.WriteFile(filepath.Join(root, dest), drifted, 0o644); err != nil {
		t.Fatal(err)
	}
	before := fixture.Snap(t, root)
	if _, err := applyForce(root, c2.Path, c3.Path); !errors.Is(err, ErrNoBase) {
		t.Fatalf("batch onto a drifted file = %v, want ErrNoBase", err)
	}
	fixture.AssertUnchanged(t, root, before)
	// Restored, the same batch applies, and within a batch a patch may
	// build on what an earlier overlay of it writes.
	if err := os.WriteFile(filepath.Join(root, dest), v1, 0o644); err != nil {
		t.Fatal(err)
	}
	v4 := append(append([]byte(nil), v1...), "tail and more"...)
	c4 := f.Create("1.0.4", Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(v4))}}})
	if _, err := apply(root, c2.Path, c3.Path, c4.Path); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, dest)); !bytes.Equal(got, v4) {
		t.Fatal("the batch did not rebuild 1.0.4's content")
	}
}

// TestPatchChainBounded: a file patched again and again ships whole once
// its content is more than a few patches deep, so publishing never reads
// back a line's whole history of it.
func TestPatchChainBounded(t *testing.T) {
	f := fixture.New(t)
	const dest = "/usr/lib/libbig.so"
	content := library(6, 100<<10)
	var whole []string
	for i := 1; i <= 12; i++ {
		content = append(content, byte('a'+i))
		v := "1.0." + strconv.Itoa(i)
		c := f.Create(v, Change{Adds: []Add{{Dest: dest, Src: f.HostFile(string(content))}}})
		if len(c.Manifest.Patches) == 0 {
			whole = append(whole, v)
		}
	}
	// 1.0.1 adds the file; 1.0.2 to 1.0.10 patch it (the ninth patch's
	// base is eight patches deep); 1.0.11 ships whole; 1.0.12 patches that.
	if strings.Join(whole, ",") != "1.0.1,1.0.11" {
		t.Fatalf("shipped whole: %v, want 1.0.1 and 1.0.11", whole)
	}
}

// TestPatchBasesFromImage changes, in one overlay, three large files the
// image holds (their bases read from it in one pass: tar once, or one
// unsquashfs) and one an earlier overlay added (read on its own): every
// one ships as a patch, and a node applying the overlay gets each file's
// new content.
func TestPatchBasesFromImage(t *testing.T) {
	t.Run("tar", func(t *testing.T) { patchBasesFromImage(t) })
	t.Run("squashfs", func(t *testing.T) { patchBasesFromImage(t, fixture.Squashfs()) })
}

func patchBasesFromImage(t *testing.T, opts ...fixture.Option) {
	files := maps.Clone(fixture.Files)
	libs := []string{"usr/lib/liba.so", "usr/lib/libb.so", "usr/lib/libc-[x]*.so"}
	for i, p := range libs {
		files[p] = string(library(uint64(10+i), 150<<10))
	}
	f := fixture.New(t, append(opts, fixture.WithRecipe(fixture.Recipe, files))...)
	later := library(20, 120<<10)
	c1 := f.Create("1.0.1", Change{Adds: []Add{{Dest: "/usr/lib/libz.so", Src: f.HostFile(string(later))}}})
	want := map[string]string{"usr/lib/libz.so": string(later) + "edit"}
	for _, p := range libs {
		want[p] = files[p][:1000] + "an edit" + files[p][1000:]
	}
	var ch Change
	for p, content := range want {
		ch.Adds = append(ch.Adds, Add{Dest: "/" + p, Src: f.HostFile(content)})
	}
	// The image's bases come from the one pass: reading one on its own
	// (rdsquashfs) would fail.
	path := os.Getenv("PATH")
	shim := t.TempDir()
	if err := os.WriteFile(filepath.Join(shim, "rdsquashfs"), []byte("#!/bin/sh\necho no single reads here >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", shim+":"+path)
	c := f.Create("1.0.2", ch)
	t.Setenv("PATH", path)
	if len(c.Manifest.Patches) != len(want) {
		t.Fatalf("patches %+v, want one for each of %d files", c.Manifest.Patches, len(want))
	}
	root := f.Provision()
	fixture.MustApply(t, root, c1.Path, c.Path)
	for p, content := range want {
		if got, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(got) != content {
			t.Errorf("/%s on the node: %d bytes, %v; want the new %d", p, len(got), err, len(content))
		}
	}
}

// TestPatchBaseTamperedInImage: an image whose bytes for a file are not
// the ones its manifest records gives no base, read in one pass or on its
// own; the overlay is not created.
func TestPatchBaseTamperedInImage(t *testing.T) {
	files := maps.Clone(fixture.Files)
	libs := []string{"usr/lib/liba.so", "usr/lib/libb.so"}
	for i, p := range libs {
		files[p] = string(library(uint64(30+i), 100<<10))
	}
	f := fixture.New(t, fixture.WithRecipe(fixture.Recipe, files))
	img := filepath.Join(f.Repo, "images", filepath.Base(f.Image))
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte(files[libs[1]][:64]))
	if at < 0 {
		t.Fatal("libb.so's bytes are not in the tar image")
	}
	b[at+100] ^= 1
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var ch Change
	for _, p := range libs {
		ch.Adds = append(ch.Adds, Add{Dest: "/" + p, Src: f.HostFile(files[p] + "more")})
	}
	_, err = Create(context.Background(), f.Repo, f.Key, ch, CreateOptions{Line: "test", Version: "1.0.1"})
	if !errors.Is(err, ErrPayload) || !strings.Contains(err.Error(), "libb.so") {
		t.Fatalf("create against a tampered image = %v, want ErrPayload naming libb.so", err)
	}
}
