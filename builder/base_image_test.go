package builder_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

const layeredRecipe = `line: layered
version: 2.0.0
epoch: 1767225600
base:
  image: %IMAGE%
files:
  - path: /etc/layer.conf
    content: "layer\n"
    mode: "0600"
    owner: "7:7"
remove:
  - /etc/demo/worker.conf
services:
  - unit: demo-web.service
    reload: [/etc/demo/web.d]
`

func writeLayered(t *testing.T, dir, image string) string {
	t.Helper()
	return writeRecipe(t, dir, strings.Replace(layeredRecipe, "%IMAGE%", image, 1))
}

func TestImageBase(t *testing.T) {
	requireTools(t)
	key := testKey(t)
	dir := t.TempDir()
	lower := buildDemo(t, filepath.Join(dir, "lower"), builder.WithKey(key))
	res, err := builder.Build(context.Background(), writeLayered(t, dir, lower.Image), filepath.Join(dir, "upper"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	m := res.ManifestData

	// The expected tree: the lower image's, without its keys, plus the
	// layer's file, minus the removed one, plus this build's keys.
	want := tree.NewState(lower.ManifestData.Files)
	for p := range want {
		if strings.HasPrefix(p, manifests.KeysDir+"/") {
			delete(want, p)
		}
	}
	if err := want.Delete("etc/demo/worker.conf"); err != nil {
		t.Fatal(err)
	}
	layer := []byte("layer\n")
	want["etc/layer.conf"] = manifests.Entry{Path: "etc/layer.conf", Type: manifests.TypeFile, Mode: 0600, UID: 7, GID: 7,
		Size: int64(len(layer)), SHA256: manifests.Digest(layer)[len(manifests.DigestPrefix):]}
	for name, data := range keyFiles(t, key) {
		want[manifests.KeysDir+"/"+name] = manifests.Entry{Path: manifests.KeysDir + "/" + name, Type: manifests.TypeFile, Mode: 0644,
			Size: int64(len(data)), SHA256: manifests.Digest(data)[len(manifests.DigestPrefix):]}
	}
	if m.TreeDigest != want.Digest() {
		t.Errorf("layered tree digest %s, want %s", m.TreeDigest, want.Digest())
	}
	// Owners and modes of the lower image come through exactly.
	got := tree.NewState(m.Files)
	for _, p := range []string{"usr/bin/demo-passwd", "var/lib/demo", "etc/demo/secret.token"} {
		if got[p] != tree.NewState(lower.ManifestData.Files)[p] {
			t.Errorf("%s = %+v, lower image has %+v", p, got[p], tree.NewState(lower.ManifestData.Files)[p])
		}
	}
	// The squashfs agrees, and its embedded manifest is the new one, not
	// the lower image's.
	es, contents := readImage(t, res.Image)
	if d := manifests.TreeDigest(withoutManifest(es)); d != m.TreeDigest {
		t.Errorf("image tree digest %s, manifest says %s", d, m.TreeDigest)
	}
	if string(contents[manifests.ImageManifestPath]) != string(readFile(t, res.Manifest)) {
		t.Error("the embedded image.json is not the new image's manifest")
	}
	if web := findService(m.Catalog, "demo-web.service"); web == nil || len(web.ReloadPaths) != 1 {
		t.Errorf("catalog demo-web.service = %+v", web)
	}
}

func keyFiles(t *testing.T, key *sign.Key) map[string][]byte {
	t.Helper()
	ks, err := key.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	return ks.Files()
}

func TestImageBaseRefusals(t *testing.T) {
	requireTools(t)
	key, other := testKey(t), testKey(t)
	dir := t.TempDir()
	lower := buildDemo(t, filepath.Join(dir, "lower"), builder.WithKey(key))
	recipe := writeLayered(t, dir, lower.Image)

	// Built with another key, the base must be signed by a key this build
	// trusts.
	_, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "other"), builder.WithKey(other))
	if !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("base signed by an untrusted key: Build = %v, want ErrBadSignature", err)
	}

	// A manifest that does not match its signature is refused.
	raw := readFile(t, lower.Manifest)
	tampered := strings.Replace(string(raw), `"line": "demo"`, `"line": "demx"`, 1)
	if tampered == string(raw) {
		t.Fatal("test did not tamper with the manifest")
	}
	if err := os.WriteFile(lower.Manifest, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "tampered"), builder.WithKey(key)); !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("tampered base manifest: Build = %v, want ErrBadSignature", err)
	}
	if err := os.WriteFile(lower.Manifest, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	// A squashfs whose content differs from the manifest is refused.
	other2 := buildDemo(t, filepath.Join(dir, "b"), builder.WithKey(key), builder.WithEpoch(1))
	if err := os.Rename(other2.Image, lower.Image); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "swapped"), builder.WithKey(key)); !errors.Is(err, builder.ErrImageMismatch) {
		t.Errorf("swapped squashfs: Build = %v, want ErrImageMismatch", err)
	}
}
