package disk_test

import (
	"testing"

	"github.com/strata-dev/strata/builder/disk/disktest"
)

// TestMain runs the tests in a private mount namespace (testenv).
func TestMain(m *testing.M) { disktest.PrivateMounts(m) }
