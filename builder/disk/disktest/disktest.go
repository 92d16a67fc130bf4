package disktest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
)

// Tools are what writing and mounting node disks run (make deps installs
// them); pass it to testenv.RequireTools.
var Tools = []string{"mkfs.ext4", "e2fsck", "debugfs", "fsck.vfat", "mcopy", "mdir", "mount", "unshare", disk.DefaultBootEFI}

// PrivateMounts runs the package's tests again in a private mount
// namespace, the way strata runs work on an offline disk (disk.Reexec):
// whatever they mount is gone when the process ends, however it ends. A
// package's TestMain is
//
//	func TestMain(m *testing.M) { disktest.PrivateMounts(m) }
//
// Under -short (make unit) the tests run as they are: every test that
// mounts skips there (testenv.RequireTools, testenv.RequireKernel).
func PrivateMounts(m *testing.M) {
	flag.Parse()
	if !testing.Short() && !disk.InPrivateNamespace() {
		code, err := disk.Reexec(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "running the tests in a private mount namespace:", err)
			os.Exit(1)
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}
