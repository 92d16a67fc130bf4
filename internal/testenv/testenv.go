package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/sign"
)

// PrivateMounts runs the package's tests again in a private mount
// namespace, the way strata runs work on an offline disk (disk.Reexec):
// whatever they mount is gone when the process ends, however it ends. A
// package's TestMain is
//
//	func TestMain(m *testing.M) { testenv.PrivateMounts(m) }
func PrivateMounts(m *testing.M) {
	if !disk.InPrivateNamespace() {
		code, err := disk.Reexec(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "running the tests in a private mount namespace:", err)
			os.Exit(1)
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// The tools groups of tests need (make deps installs them all).
var (
	// Squashfs are what building, provisioning and regenerating images
	// run.
	Squashfs = []string{"mksquashfs", "sqfs2tar", "rdsquashfs"}
	// Disk are what writing and mounting node disks run.
	Disk = []string{"mkfs.ext4", "e2fsck", "debugfs", "fsck.vfat", "mcopy", "mdir", "mount", "unshare", disk.DefaultBootEFI}
)

// RequireTools fails the test, naming what is missing, unless every tool
// of every group is on PATH (or, for a path, exists): a missing tool is
// a missing install step, never a reason to skip.
func RequireTools(t testing.TB, groups ...[]string) {
	t.Helper()
	var missing []string
	for _, g := range groups {
		for _, tool := range g {
			if strings.Contains(tool, "/") {
				if _, err := os.Stat(tool); err != nil {
					missing = append(missing, tool)
				}
			} else if _, err := exec.LookPath(tool); err != nil {
				missing = append(missing, tool)
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s required (run make deps)", strings.Join(missing, ", "))
	}
}

// Key returns a new signing key, its files (NAME.key, NAME.pub) in a
// temporary directory of the test.
func Key(t testing.TB) *sign.Key {
	t.Helper()
	k, _ := KeyIn(t, t.TempDir(), "k")
	return k
}

// KeyIn generates a key pair as dir/NAME.key and dir/NAME.pub and returns
// the key and the .pub file's bytes.
func KeyIn(t testing.TB, dir, name string) (*sign.Key, []byte) {
	t.Helper()
	prefix := filepath.Join(dir, name)
	if err := sign.Generate(prefix); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}
