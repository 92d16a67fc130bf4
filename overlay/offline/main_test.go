package offline_test

import (
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
)

// TestMain runs the tests in a private mount namespace (testenv).
func TestMain(m *testing.M) { testenv.PrivateMounts(m) }
