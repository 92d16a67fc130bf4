package testnode_test

import (
	"testing"

	"github.com/strata-dev/strata/tests/testnode"
)

func TestMain(m *testing.M) { testnode.Main(m) }
