package repo_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// image builds a one-file image of line line signed by a new key.
func image(t *testing.T, line string) (string, *sign.Key, string) {
	t.Helper()
	key, pub := newKey(t)
	return imageAt(t, line, "1.0.0", key), key, pub
}

// newKey generates a key pair and returns the secret key and the path of
// its public half.
func newKey(t *testing.T) (*sign.Key, string) {
	t.Helper()
	dir := t.TempDir()
	if err := sign.Generate(filepath.Join(dir, "k")); err != nil {
		t.Fatal(err)
	}
	key, err := sign.LoadKey(filepath.Join(dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	return key, filepath.Join(dir, "k.pub")
}

// imageAt builds a one-file image of line at version signed by key.
func imageAt(t *testing.T, line, version string, key *sign.Key) string {
	t.Helper()
	dir := t.TempDir()
	body := "line: " + line + "\nversion: " + version + "\nfiles:\n  - path: /etc/x\n    content: \"" + version + "\\n\"\n"
	return fixture.Image(t, dir, body, nil, imagefile.Tar, builder.WithKey(key))
}

func TestInitOpenAndLines(t *testing.T) {
	img, key, pub := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := repo.Init(context.Background(), dir, img, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Index.Lines) != 1 || r.Index.Lines[0].Name != "alpha" || r.Index.Lines[0].Image.SHA256 == "" {
		t.Fatalf("index after init: %+v", r.Index)
	}
	trust, err := sign.LoadPublicFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, trust); err != nil {
		t.Fatalf("open with the signing key: %v", err)
	}
	if _, err := repo.Init(context.Background(), dir, img, key); !errors.Is(err, repo.ErrExists) {
		t.Fatalf("second init of the same line: %v, want ErrExists", err)
	}
	// A second line signed by the same key joins the repository.
	beta := fixture.Image(t, t.TempDir(), "line: beta\nversion: 2.0.0\nfiles:\n  - path: /etc/y\n    content: \"y\\n\"\n", nil, imagefile.Tar, builder.WithKey(key))
	if r, err = repo.Init(context.Background(), dir, beta, key); err != nil || len(r.Index.Lines) != 2 {
		t.Fatalf("adding line beta: %v, %d lines", err, len(r.Index.Lines))
	}
}

func TestOpenRefusesBadSignaturesAndTampering(t *testing.T) {
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	_, _, otherPub := image(t, "other")
	other, err := sign.LoadPublicFile(otherPub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, other); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("open with a foreign key: %v, want ErrBadSignature", err)
	}
	idx := filepath.Join(dir, repo.IndexFile)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, []byte(strings.Replace(string(b), `"1.0.0"`, `"1.0.9"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, nil); err == nil {
		t.Fatal("open accepted an edited index")
	}
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(repo.SigPath(idx)); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, nil); !errors.Is(err, sign.ErrUnsigned) {
		t.Fatalf("open without index signature: %v, want ErrUnsigned", err)
	}
	// A valid signature of the same bytes by the same key, made as an
	// overlay manifest's: its trusted comment says it is not an index's.
	if err := os.WriteFile(repo.SigPath(idx), key.Sign(b, sign.OverlayComment("alpha", "1.0.1")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, nil); !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), "strata index") {
		t.Fatalf("open with an index signed as an overlay: %v, want ErrBadSignature naming strata index", err)
	}
}

func TestInitRefusesUntrustedKeyAndChangesNothing(t *testing.T) {
	img, _, _ := image(t, "alpha")
	_, stranger, _ := image(t, "other")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, stranger); err == nil || !strings.Contains(err.Error(), "does not trust") {
		t.Fatalf("init with a key the image does not trust: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused init created %s", dir)
	}
}

func TestImageDigestMismatchIsTampering(t *testing.T) {
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	r, err := repo.Init(context.Background(), dir, img, key)
	if err != nil {
		t.Fatal(err)
	}
	l := r.Index.Lines[0]
	l.Image.Digest = "sha256:" + strings.Repeat("0", 64)
	if _, err := r.Image(context.Background(), &l, nil); !errors.Is(err, repo.ErrTampered) {
		t.Fatalf("image with another digest: %v, want ErrTampered", err)
	}
}

// An index from before serials, expiries and sizes is refused, naming
// the way out; Refresh brings it up to date, reading the sizes off the
// members, and a member whose size then changes is refused unread.
func TestRefreshMigratesAndSizesBind(t *testing.T) {
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, repo.IndexFile)
	raw, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	var x manifests.Index
	if err := manifests.Decode(raw, &x); err != nil {
		t.Fatal(err)
	}
	size := x.Lines[0].Image.Size
	x.Serial, x.Expires, x.Lines[0].Image.Size = 0, "", 0
	old, err := manifests.Encode(&x)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(repo.SigPath(idx), key.Sign(old, sign.IndexComment), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Open(context.Background(), dir, nil); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "repo refresh") {
		t.Fatalf("open of an old index: %v, want ErrInvalid naming repo refresh", err)
	}
	r, err := repo.Refresh(context.Background(), dir, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Index.Serial != 1 || r.Index.Lines[0].Image.Size != size {
		t.Fatalf("refreshed index: serial %d, image size %d; want 1 and %d", r.Index.Serial, r.Index.Lines[0].Image.Size, size)
	}
	// Past a serial a compromised key published: --serial.
	if _, err := repo.RefreshTo(context.Background(), dir, key, 0, 1); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("refresh to the current serial: %v, want ErrInvalid", err)
	}
	if r, err = repo.RefreshTo(context.Background(), dir, key, 0, 5000); err != nil || r.Index.Serial != 5000 {
		t.Fatalf("refresh to serial 5000: %v, serial %d", err, r.Index.Serial)
	}
	if r, err = repo.Open(context.Background(), dir, nil); err != nil || r.Index.Serial != 5000 {
		t.Fatalf("the index after refresh --serial: %v", err)
	}
	r, err = repo.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := r.Index.Lines[0]
	f, err := os.OpenFile(r.Path(l.Image.File), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("grown"))
	f.Close()
	if _, _, err := repo.HashMember(context.Background(), r.Store, l.Image.File, l.Image.Size); !errors.Is(err, repo.ErrTampered) || !strings.Contains(err.Error(), "bytes, the index says") {
		t.Fatalf("hashing a grown image: %v, want ErrTampered naming both sizes", err)
	}
	// Another key cannot refresh it.
	_, other, _ := image(t, "beta")
	if _, err := repo.Refresh(context.Background(), dir, other, 0); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("refresh with a foreign key: %v, want ErrBadSignature", err)
	}
}

// countingStore counts the members opened.
type countingStore struct {
	repo.Store
	opened []string
}

func (c *countingStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	c.opened = append(c.opened, name)
	return c.Store.Open(ctx, name)
}

// An index whose signature no trusted key verifies leads a reader to
// follow key rotations only when the signature is well formed: a junk
// signature costs nothing but the index and itself.
func TestJunkIndexSignatureReadsNothingElse(t *testing.T) {
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "y")
	if err := os.WriteFile(src, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch := overlay.Change{Adds: []overlay.Add{{Dest: "/etc/y", Src: src}}}
	if _, err := overlay.Create(context.Background(), dir, key, ch, overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, repo.SigPath(repo.IndexFile)), []byte("untrusted comment: x\njunk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := key.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: repo.Dir(dir)}
	if _, err := repo.OpenStore(context.Background(), st, other); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("open with a junk signature: %v, want ErrBadSignature", err)
	}
	if strings.Join(st.opened, " ") != "index.json index.json.minisig" {
		t.Errorf("opened %v, want only the index and its signature", st.opened)
	}
}

// A publisher opens the repository with no keys of its own, so the index
// is verified with the keys its images list, and then loads the line,
// image included: the image manifest (a megabyte for a 4,000-file image)
// is read once. The copy kept is one whose bytes hash to the digest the
// index names: a reference with another digest reads the file again and
// is refused.
func TestImageManifestReadOnce(t *testing.T) {
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: repo.Dir(dir)}
	r, err := repo.OpenStore(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.LoadHead(context.Background(), r, ""); err != nil {
		t.Fatal(err)
	}
	l := r.Index.Lines[0]
	mp := repo.ManifestPath(l.Image.File)
	if n := slices.Index(st.opened, mp); n < 0 || slices.Contains(st.opened[n+1:], mp) {
		t.Fatalf("opened %v, want %s once", st.opened, mp)
	}
	l.Image.Digest = manifests.Digest([]byte("another manifest"))
	if _, err := r.Image(context.Background(), &l, nil); !errors.Is(err, repo.ErrTampered) {
		t.Fatalf("image under another digest: %v, want ErrTampered", err)
	}
	if n := len(st.opened); st.opened[n-2] != mp {
		t.Errorf("opened %v, want %s read again for the other digest", st.opened, mp)
	}
}
