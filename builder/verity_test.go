package builder_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/verity"
)

// TestBuildVerity builds an image of 3 MiB that does not compress (a
// tree of two levels) and opens it the way an operator
// or an initramfs would: veritysetup verify, with nothing but the values
// of the signed verity record, accepts the image; with one byte of the
// squashfs changed, veritysetup and strata's own check both refuse it,
// and strata names the block. The image still reads as squashfs with its
// tree appended.
func TestBuildVerity(t *testing.T) {
	requireTools(t)
	testenv.RequireTools(t, []string{"veritysetup", "unsquashfs"})
	key := testKey(t)
	dir := t.TempDir()
	blob := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/usr/share"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs/usr/share/blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(recipe, []byte("line: big\nversion: 1.0.0\nepoch: 1\nbase:\n  dir: rootfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	im, err := repo.LoadImage(res.Image, nil)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := key.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	v, err := repo.LoadVerity(res.Image, im, ks)
	if err != nil {
		t.Fatalf("LoadVerity: %v", err)
	}
	if *v != *res.Verity || v.Image != res.Digest {
		t.Fatalf("record on disk %+v, build returned %+v for image %s", v, res.Verity, res.Digest)
	}
	fi, err := os.Stat(res.Image)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := verity.FromRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	if v.DataBlocks < 129 {
		t.Fatalf("%d data blocks: not a tree of two levels", v.DataBlocks)
	}
	if size := v.HashOffset + p.TreeSize(); fi.Size() != size || v.HashOffset%4096 != 0 {
		t.Fatalf("image of %d bytes; the record says data to %d and %d bytes in all", fi.Size(), v.HashOffset, size)
	}
	args := []string{"verify", res.Image, res.Image, v.RootHash, "--no-superblock", "--hash=" + v.Hash,
		"--data-block-size=" + strconv.Itoa(v.DataBlockSize), "--hash-block-size=" + strconv.Itoa(v.HashBlockSize),
		"--data-blocks=" + strconv.FormatInt(v.DataBlocks, 10), "--hash-offset=" + strconv.FormatInt(v.HashOffset, 10), "--salt=" + v.Salt}
	if out, err := exec.Command("veritysetup", args...).CombinedOutput(); err != nil {
		t.Fatalf("veritysetup verify: %v\n%s", err, out)
	}
	if err := repo.VerifyTree(context.Background(), res.Image, v); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unsquashfs", "-l", "-d", "x", res.Image).CombinedOutput(); err != nil || !strings.Contains(string(out), "x/usr/lib/strata/image.json") {
		t.Fatalf("unsquashfs -l of the image with its tree: %v\n%s", err, out)
	}

	// One byte changed in the middle of the squashfs.
	f, err := os.OpenFile(res.Image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := v.HashOffset / 2
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command("veritysetup", args...).CombinedOutput(); err == nil {
		t.Fatalf("veritysetup verify accepted a changed image:\n%s", out)
	}
	err = repo.VerifyTree(context.Background(), res.Image, v)
	if want := "data block " + strconv.FormatInt(at/4096, 10) + " "; !errors.Is(err, verity.ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("VerifyImage of a changed image = %v, want ErrCorrupt naming %q", err, want)
	}
	if !strings.Contains(err.Error(), filepath.Base(res.Image)) {
		t.Errorf("the error %q does not name the image", err)
	}
}
