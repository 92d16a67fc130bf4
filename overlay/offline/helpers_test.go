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
	"github.com/strata-dev/strata/builder/disk/disktest"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
)

func requireDiskTools(t *testing.T) {
	t.Helper()
	testenv.RequireTools(t, testenv.Squashfs, disktest.Tools)
}

func testKey(t *testing.T) *sign.Key { return testenv.Key(t) }

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
