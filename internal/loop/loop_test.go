package loop_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder/disk/disktest"
	"github.com/strata-dev/strata/internal/loop"
	"github.com/strata-dev/strata/internal/testenv"
)

// TestMain runs the tests in a private mount namespace (testenv).
func TestMain(m *testing.M) { disktest.PrivateMounts(m) }

// A filesystem at an offset of a larger file mounts through its own loop
// device, read-write or read-only, and the device goes with the mount.
func TestMountRange(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireTools(t, []string{"mkfs.ext4", "losetup"})
	dir := t.TempDir()
	file := filepath.Join(dir, "disk.img")
	const off, size = 1 << 20, 8 << 20
	if err := os.WriteFile(file, bytes.Repeat([]byte{0xaa}, off+size+off), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "offset=1048576", file, "8192k").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Mount(file, loop.Config{Offset: off, SizeLimit: size}, mnt, "ext4", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "x"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	requireDetached(t, dev, file)
	// The bytes around the range are untouched.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:off], bytes.Repeat([]byte{0xaa}, off)) || !bytes.Equal(b[off+size:], bytes.Repeat([]byte{0xaa}, off)) {
		t.Fatal("the mount wrote outside its range")
	}

	dev, err = loop.Mount(file, loop.Config{Offset: off, SizeLimit: size, ReadOnly: true}, mnt, "ext4", 0, "noload")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "x")); err != nil || string(got) != "hello" {
		t.Fatalf("reading back: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "y"), nil, 0o644); err == nil {
		t.Fatal("wrote to a read-only loop mount")
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	requireDetached(t, dev, file)

	// A failed mount leaves no device behind.
	if _, err := loop.Mount(file, loop.Config{ReadOnly: true}, mnt, "squashfs", 0, ""); err == nil {
		t.Fatal("mounted an ext4 range as squashfs")
	}
	requireDetached(t, "", file)
}

// requireDetached fails if dev (if given) or any device backed by file
// is still attached.
func requireDetached(t *testing.T, dev, file string) {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if (dev != "" && strings.HasPrefix(line, dev+":")) || strings.Contains(line, file) {
			t.Fatalf("loop device still attached: %s", line)
		}
	}
}
