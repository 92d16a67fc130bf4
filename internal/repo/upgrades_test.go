package repo_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
)

// repo add-image checks the signer against the keys the line trusts at
// its head: after a rotation revoked the first key, an image it signs is
// refused and one signed by its successor goes in. A file in the way of
// what it would write (one the index does not name) is refused, left as
// it was, and nothing else is written.
func TestAddImageAfterRotation(t *testing.T) {
	ctx := context.Background()
	img, k1, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, k1); err != nil {
		t.Fatal(err)
	}
	k2, _ := newKey(t)
	if _, err := overlay.RotateKeys(ctx, dir, k1, overlay.RotateOptions{Add: [][]byte{k2.PublicText()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.RotateKeys(ctx, dir, k2, overlay.RotateOptions{Revoke: []string{k1.ID()}}); err != nil {
		t.Fatal(err)
	}
	index := readIndex(t, dir)
	_, err := repo.AddImage(ctx, dir, imageAt(t, "alpha", "1.1.0", k1), k1)
	if !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), k2.ID()) {
		t.Fatalf("an image signed by a revoked key: %v; want a signature error naming the trusted %s", err, k2.ID())
	}
	if readIndex(t, dir) != index {
		t.Fatal("a refused image changed the index")
	}
	if _, err := os.Stat(filepath.Join(dir, "images", "alpha-1.1.0.squashfs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused image left its file: %v", err)
	}

	stray := filepath.Join(dir, "images", "alpha-1.1.0.image.json.minisig")
	if err := os.MkdirAll(filepath.Dir(stray), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stray, []byte("not ours\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	next := imageAt(t, "alpha", "1.1.0", k2)
	if _, err := repo.AddImage(ctx, dir, next, k2); !errors.Is(err, repo.ErrExists) || !strings.Contains(err.Error(), "images/alpha-1.1.0.image.json.minisig exists already") {
		t.Fatalf("a file in the way: %v, want ErrExists naming it", err)
	}
	if b, err := os.ReadFile(stray); err != nil || string(b) != "not ours\n" {
		t.Fatalf("the file in the way was changed: %q %v", b, err)
	}
	for _, f := range []string{"alpha-1.1.0.squashfs", "alpha-1.1.0.image.json"} {
		if _, err := os.Lstat(filepath.Join(dir, "images", f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused image wrote %s (%v)", f, err)
		}
	}
	if readIndex(t, dir) != index {
		t.Fatal("a refused image changed the index")
	}
	os.Remove(stray)
	if _, err := repo.AddImage(ctx, dir, next, k2); err != nil {
		t.Fatalf("an image signed by the line's current key: %v", err)
	}
}

func readIndex(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
