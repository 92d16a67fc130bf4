package offline_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/sign"
)

func requireDiskTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"mksquashfs", "sqfs2tar", "rdsquashfs", "mkfs.ext4", "e2fsck", "debugfs", "fsck.vfat", "mount", disk.DefaultBootEFI} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (run make deps): %v", tool, err)
		}
	}
}

func testKey(t *testing.T) *sign.Key {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "k")
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// extract copies partition p of the disk file into a file of its own.
func extract(t *testing.T, file string, p disk.Partition) string {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out := filepath.Join(t.TempDir(), p.Name+".img")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, io.NewSectionReader(in, p.Offset, p.Size)); err != nil {
		t.Fatal(err)
	}
	return out
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
