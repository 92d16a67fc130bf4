package cpio_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/cpio"
	"github.com/strata-dev/strata/internal/testenv"
)

func archive(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	w := cpio.NewWriter(&b)
	for _, err := range []error{
		w.Dir("strata", 0o755),
		w.Dir("strata/keys", 0o755),
		w.File("strata/keys/A.pub", 0o644, []byte("key\n")),
		w.File("strata/strata", 0o755, []byte("#!/bin/sh\necho hi\n")),
		w.File("strata/empty", 0o600, nil),
		w.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestLayout pins the byte layout of a newc header: magic, fields in hex,
// the name with its NUL padded to four bytes, data padded to four bytes,
// the trailer; and that the same members give the same bytes.
func TestLayout(t *testing.T) {
	a := archive(t)
	if !bytes.Equal(a, archive(t)) {
		t.Fatal("the same members gave different archives")
	}
	if !bytes.HasPrefix(a, []byte("070701")) || len(a)%4 != 0 {
		t.Fatalf("archive of %d bytes starting %q", len(a), a[:6])
	}
	// The first header: inode 1, directory 0755, 2 links, no data, name
	// "strata" (7 bytes with NUL), so 110+7 = 117, padded to 120.
	want := "070701" + "00000001" + "000041ed" + "00000000" + "00000000" + "00000002" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000007" + "00000000" + "strata\x00\x00\x00\x00"
	if string(a[:120]) != want {
		t.Fatalf("first member:\n%q\nwant\n%q", a[:120], want)
	}
	if !bytes.Contains(a, []byte("TRAILER!!!\x00")) {
		t.Fatal("no trailer")
	}
}

func TestRefusesNames(t *testing.T) {
	for _, name := range []string{"", "/abs", "a/../b", "..", "../x", "a//b", "a/", ".", "a\x00b"} {
		w := cpio.NewWriter(&bytes.Buffer{})
		if err := w.File(name, 0o644, nil); !errors.Is(err, cpio.ErrName) {
			t.Errorf("File(%q) = %v, want ErrName", name, err)
		}
	}
}

// TestUnpacksWithCpio: GNU cpio, which reads what the kernel reads,
// unpacks the archive to the same files and modes.
func TestUnpacksWithCpio(t *testing.T) {
	testenv.RequireTools(t, []string{"cpio"})
	dir := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(archive(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	for name, want := range map[string]struct {
		data string
		mode os.FileMode
	}{"strata/keys/A.pub": {"key\n", 0o644}, "strata/strata": {"#!/bin/sh\necho hi\n", 0o755}, "strata/empty": {"", 0o600}} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if err != nil || string(b) != want.data || fi.Mode().Perm() != want.mode {
			t.Errorf("%s: %q %v mode %v, want %q %v", name, b, err, fi.Mode().Perm(), want.data, want.mode)
		}
	}
}
