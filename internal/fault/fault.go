package fault

import (
	"os"
	"sync"
	"testing"
)

// Env names the variable a test sets to the point at which a test binary
// (or a helper process it starts) exits.
const Env = "STRATA_TEST_CRASH"

// ExitCode is the status a process stopped at a point exits with.
const ExitCode = 99

var at = sync.OnceValue(func() string {
	if !testing.Testing() && !built {
		return ""
	}
	return os.Getenv(Env)
})

// Point exits the process at once with ExitCode when a test asked to
// crash at name. Nothing is flushed or cleaned up.
func Point(name string) {
	if a := at(); a != "" && a == name {
		os.Exit(ExitCode)
	}
}
