package disk_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
)

// TestProvisionVerityBoot provisions an image with a kernel and strata:
// the boot entry loads the verity initrd before the image's own, mounts
// the dm-verity device (so an initramfs that does not open it fails
// closed) and names the partition and the signed root hash; the initrd holds the image's strata, its keys
// and its signed record, which CheckRootRecord accepts for that hash
// only; root A verifies with veritysetup against the record's values.
func TestProvisionVerityBoot(t *testing.T) {
	requireDiskTools(t)
	testenv.RequireTools(t, []string{"cpio", "veritysetup"})
	dir := t.TempDir()
	recipe := "line: vb\nversion: 1.0.0\nepoch: 1767225600\nbase:\n  dir: rootfs\nfiles:\n" +
		"  - path: /boot/vmlinuz-6.1.0-1\n    content: \"kernel\\n\"\n  - path: /boot/initrd.img-6.1.0-1\n    content: \"initrd\\n\"\nstrata: {}\n"
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "strata-stand-in")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho stand-in\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	key := testKey(t)
	res, err := builder.Build(context.Background(), filepath.Join(dir, "recipe.yaml"), filepath.Join(dir, "out"), builder.WithKey(key), builder.WithStrataBinary(bin))
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := key.PublicKeySet()
	d := filepath.Join(dir, "disk.img")
	r, err := disk.Provision(context.Background(), res.Image, d, trust, disk.Options{Size: 512 << 20, NodeID: "vb"})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verity
	entry := espRead(t, d, "/loader/entries/strata-1-a.conf")
	if !strings.Contains(entry, "initrd /strata/a/verity.img\ninitrd /strata/a/initrd.img\n") ||
		!strings.Contains(entry, "options root=/dev/mapper/strata-root strata.root=PARTUUID="+strings.ToLower(r.Layout.Part(disk.PartRootA).GUID)+" strata.verity="+v.RootHash+" ro ") {
		t.Fatalf("loader entry:\n%s", entry)
	}

	// The initrd, unpacked as the kernel would.
	initrd := espRead(t, d, "/strata/a/verity.img")
	root := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = root, strings.NewReader(initrd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	files := filepath.Join(root, "strata")
	if b, _ := os.ReadFile(filepath.Join(files, "bin/strata")); !bytes.Equal(b, readFile(t, bin)) {
		t.Fatal("the initrd's strata is not the image's")
	}
	if b, _ := os.ReadFile(filepath.Join(files, "verity.json")); !bytes.Equal(b, readFile(t, repo.VerityPath(res.Image))) {
		t.Fatal("the initrd's record is not the image's")
	}
	if _, err := os.Stat(filepath.Join(files, "keys", key.ID()+".pub")); err != nil {
		t.Fatalf("the initrd lacks the image's key: %v", err)
	}
	got, id, err := disk.CheckRootRecord(files, v.RootHash)
	if err != nil || id != key.ID() || got.RootHash != v.RootHash {
		t.Fatalf("CheckRootRecord: %v (%s)", err, id)
	}

	// Root A holds the image with its tree: veritysetup verifies it with
	// the record's values alone.
	part := extract(t, d, r.Layout.Part(disk.PartRootA))
	if out, err := exec.Command("veritysetup", "verify", part, part, v.RootHash, "--no-superblock",
		"--data-blocks="+strconv.FormatInt(v.DataBlocks, 10), "--hash-offset="+strconv.FormatInt(v.HashOffset, 10),
		"--salt="+v.Salt).CombinedOutput(); err != nil {
		t.Fatalf("veritysetup verify of root A: %v\n%s", err, out)
	}

	// Refusals: the initramfs stops the boot on each.
	stranger := testKey(t)
	refuse := func(name, hash, want string, edit func(dir string)) {
		t.Helper()
		c := t.TempDir()
		if err := os.CopyFS(c, os.DirFS(files)); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(c)
		}
		if _, _, err := disk.CheckRootRecord(c, hash); !errors.Is(err, disk.ErrUnverifiedRoot) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: CheckRootRecord = %v, want ErrUnverifiedRoot saying %q", name, err, want)
		}
	}
	refuse("another root hash", strings.Repeat("0", 64), "is not the signed one", nil)
	refuse("no hash", "", "is not the signed one", nil)
	refuse("a stranger's key only", v.RootHash, "signature", func(editIn string) {
		must(t, os.Remove(filepath.Join(editIn, "keys", key.ID()+".pub")))
		must(t, os.WriteFile(filepath.Join(editIn, "keys", stranger.ID()+".pub"), stranger.PublicText(), 0o644))
	})
	refuse("record signed by a stranger", v.RootHash, "signature", func(editIn string) {
		raw := readFile(t, filepath.Join(editIn, "verity.json"))
		must(t, os.WriteFile(filepath.Join(editIn, "verity.json.minisig"), stranger.Sign(raw, sign.VerityComment(v.Line, v.Version)), 0o644))
	})
	refuse("record without signature", v.RootHash, "verity.json.minisig", func(editIn string) {
		must(t, os.Remove(filepath.Join(editIn, "verity.json.minisig")))
	})
	refuse("record with another root hash, and the command line's", strings.Repeat("1", 64), "signature", func(editIn string) {
		raw := bytes.Replace(readFile(t, filepath.Join(editIn, "verity.json")), []byte(v.RootHash), []byte(strings.Repeat("1", 64)), 1)
		must(t, os.WriteFile(filepath.Join(editIn, "verity.json"), raw, 0o644))
	})
	// A partition too small for the record's image and tree is refused
	// before veritysetup runs.
	small := filepath.Join(t.TempDir(), "small")
	must(t, os.WriteFile(small, make([]byte, 1024), 0o644))
	if _, err := disk.OpenRoot(context.Background(), disk.OpenRootOptions{Device: small, RootHash: v.RootHash, Dir: files}); !errors.Is(err, disk.ErrUnverifiedRoot) || !strings.Contains(err.Error(), "needs") {
		t.Fatalf("OpenRoot on a small device = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
