package upgrade_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
)

// TestMain runs the tests again in a private mount namespace, the way
// strata runs an upgrade (disk.Reexec): whatever they mount is gone when
// the process ends, however it ends.
func TestMain(m *testing.M) {
	if !disk.InPrivateNamespace() {
		code, err := disk.Reexec(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}
