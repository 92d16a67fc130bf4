package repo_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// TestVerityRecordRefusals: a verity record is believed only when it is
// valid in every field, signed by a trusted key for exactly its image,
// and names that image's digest.
func TestVerityRecordRefusals(t *testing.T) {
	key, _ := newKey(t)
	img := imageAt(t, "alpha", "1.0.0", key)
	other := imageAt(t, "alpha", "1.0.1", key)
	im, err := repo.LoadImage(img, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := repo.LoadVerity(img, im, nil)
	if err != nil {
		t.Fatalf("the build's own record: %v", err)
	}
	if err := repo.VerifyTree(context.Background(), img, v); err != nil {
		t.Fatalf("the build's own image: %v", err)
	}
	raw, _ := os.ReadFile(repo.VerityPath(img))
	sig, _ := os.ReadFile(repo.SigPath(repo.VerityPath(img)))
	otherRaw, _ := os.ReadFile(repo.VerityPath(other))
	otherSig, _ := os.ReadFile(repo.SigPath(repo.VerityPath(other)))
	stranger, _ := newKey(t)
	resign := func(b []byte) []byte { return key.Sign(b, sign.VerityComment("alpha", "1.0.0")) }
	edit := func(f func(*manifests.Verity)) []byte {
		var w manifests.Verity
		if err := manifests.Decode(raw, &w); err != nil {
			t.Fatal(err)
		}
		f(&w)
		b, err := manifests.Encode(&w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name     string
		raw, sig []byte
		want     error
		text     string
	}{
		{"another image's record", otherRaw, otherSig, repo.ErrVerityMismatch, "1.0.1"},
		{"another image's record, signed for this one", otherRaw, resign(otherRaw), repo.ErrVerityMismatch, "1.0.1"},
		{"signed by a stranger", raw, stranger.Sign(raw, sign.VerityComment("alpha", "1.0.0")), sign.ErrBadSignature, ""},
		{"the image manifest's signature", raw, key.Sign(raw, sign.ImageComment("alpha", "1.0.0")), sign.ErrBadSignature, ""},
		{"unsigned", raw, nil, sign.ErrUnsigned, ""},
		{"root hash changed", edit(func(w *manifests.Verity) { w.RootHash = strings.Repeat("0", 64) }), sig, sign.ErrBadSignature, ""},
		{"upper-case root", edit(func(w *manifests.Verity) { w.RootHash = strings.ToUpper(w.RootHash) }), nil, manifests.ErrInvalid, "root hash"},
		{"hash offset inside the data", edit(func(w *manifests.Verity) { w.HashOffset -= 4096 }), nil, manifests.ErrInvalid, "hash offset"},
		{"odd block size", edit(func(w *manifests.Verity) { w.HashBlockSize = 512 }), nil, manifests.ErrInvalid, "block sizes"},
		{"no data", edit(func(w *manifests.Verity) { w.DataBlocks, w.HashOffset = 0, 0 }), nil, manifests.ErrInvalid, "0 data blocks"},
		{"salt not hex", edit(func(w *manifests.Verity) { w.Salt = "zz" }), nil, manifests.ErrInvalid, "salt"},
		{"long salt", edit(func(w *manifests.Verity) { w.Salt = strings.Repeat("ab", 257) }), nil, manifests.ErrInvalid, "salt"},
		{"md5", edit(func(w *manifests.Verity) { w.Hash = "md5" }), nil, manifests.ErrInvalid, "md5"},
		{"kind", edit(func(w *manifests.Verity) { w.Kind = "image" }), nil, manifests.ErrInvalid, "not a verity record"},
		{"unknown field", append(bytes.TrimSuffix(bytes.TrimSpace(bytes.Clone(raw)), []byte("}")), []byte(`,"x":1}`)...), nil, nil, "unknown field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.sig
			if s == nil && c.name != "unsigned" {
				s = resign(c.raw)
			}
			_, err := repo.ParseVerity(c.raw, s, im, nil)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("ParseVerity = %v, want %v naming %q", err, c.want, c.text)
			}
		})
	}

	// A missing record is ErrNoVerity; an image whose bytes changed fails
	// its own check.
	if err := os.Remove(repo.VerityPath(other)); err != nil {
		t.Fatal(err)
	}
	om, err := repo.LoadImage(other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.LoadVerity(other, om, nil); !errors.Is(err, repo.ErrNoVerity) {
		t.Fatalf("LoadVerity without a record = %v", err)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := repo.VerifyTree(context.Background(), img, v); err == nil || !strings.Contains(err.Error(), "data block 0 ") {
		t.Fatalf("VerifyImage of a changed image = %v", err)
	}
}

// TestRepositoryCarriesVerity: init and add-image publish an image's
// verity record beside it, a fetch brings it along once it verifies, a
// record that does not verify is published nowhere and fetched nowhere.
func TestRepositoryCarriesVerity(t *testing.T) {
	ctx := context.Background()
	key, pub := newKey(t)
	img := imageAt(t, "alpha", "1.0.0", key)
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := repo.Init(ctx, dir, img, key)
	if err != nil {
		t.Fatal(err)
	}
	l := &r.Index.Lines[0]
	for _, f := range []string{repo.VerityPath(l.Image.File), repo.SigPath(repo.VerityPath(l.Image.File))} {
		want, _ := os.ReadFile(filepath.Join(filepath.Dir(img), filepath.Base(f)))
		if got, err := os.ReadFile(r.Path(f)); err != nil || !bytes.Equal(got, want) || len(want) == 0 {
			t.Fatalf("repository %s: %v (%d bytes, want %d)", f, err, len(got), len(want))
		}
	}
	trust, err := sign.LoadPublicFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = repo.Open(ctx, dir, trust); err != nil {
		t.Fatal(err)
	}
	got, err := repo.FetchImage(ctx, r, &r.Index.Lines[0], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	im, err := repo.LoadImage(got, trust)
	if err != nil {
		t.Fatal(err)
	}
	v, err := repo.LoadVerity(got, im, trust)
	if err != nil {
		t.Fatalf("the fetched image's record: %v", err)
	}
	if err := repo.VerifyTree(ctx, got, v); err != nil {
		t.Fatal(err)
	}

	// The repository's record replaced by one for another image: the
	// fetch refuses it and writes no record.
	other := imageAt(t, "alpha", "1.0.1", key)
	vp := r.Path(repo.VerityPath(l.Image.File))
	for _, s := range [][2]string{{repo.VerityPath(other), vp}, {repo.SigPath(repo.VerityPath(other)), repo.SigPath(vp)}} {
		b, _ := os.ReadFile(s[0])
		if err := os.WriteFile(s[1], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	into := t.TempDir()
	if _, err := repo.FetchImage(ctx, r, &r.Index.Lines[0], into); !errors.Is(err, repo.ErrVerityMismatch) {
		t.Fatalf("fetch with another image's record = %v", err)
	}
	if _, err := os.Stat(filepath.Join(into, filepath.Base(vp))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused record was written: %v", err)
	}

	// add-image with a record signed by a stranger: refused, and the
	// repository keeps no file of it.
	up := imageAt(t, "alpha", "1.1.0", key)
	stranger, _ := newKey(t)
	raw, _ := os.ReadFile(repo.VerityPath(up))
	if err := os.WriteFile(repo.SigPath(repo.VerityPath(up)), stranger.Sign(raw, sign.VerityComment("alpha", "1.1.0")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.AddImage(ctx, dir, up, key); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("add-image with a forged record = %v", err)
	}
	for _, f := range []string{"alpha-1.1.0.squashfs", "alpha-1.1.0.image.json", "alpha-1.1.0.verity.json"} {
		if _, err := os.Stat(filepath.Join(dir, "images", f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("images/%s left behind: %v", f, err)
		}
	}
}
