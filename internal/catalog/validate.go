package catalog

import (
	"errors"
	"os/exec"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// ErrValidation reports a change a service's validation command refused:
// it is not published, or not switched in on a node.
var ErrValidation = manifests.Rejection("refused by validation")

// Validation is one service's validation command, to run against a tree
// with a change in place before the change is published or switched in.
type Validation struct {
	Unit string
	Argv []string
}

// OutputLine starts each line of a command's output quoted in an error:
// the command line prints such lines as lines (and nothing else of an
// error), marked as quoted, so output cannot pass for strata's words.
const OutputLine = "\n  | "

// Outcome says how a validation command failed, for the end of a
// refusal: "ARGV: exit status N" (or the error), then its output, each
// line starting with OutputLine.
func Outcome(argv []string, err error, output string) string {
	what := err.Error()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		what = ee.String()
	}
	s := strings.Join(argv, " ") + ": " + what
	if output = strings.TrimSpace(output); output != "" {
		s += ":" + OutputLine + strings.ReplaceAll(output, "\n", OutputLine)
	}
	return s
}

// ValidationsFor lists the validation commands a change must pass whose
// restart plan is actions, with cat the catalog in effect after it: one
// for each unit the plan restarts or reloads whose service declares one.
// A unit the plan only stops has nothing to load the change.
func ValidationsFor(cat manifests.Catalog, actions []manifests.ServiceAction) []Validation {
	var out []Validation
	for _, a := range actions {
		if a.Unit == "" || a.Action == manifests.ActionStop {
			continue
		}
		if cmd := ServiceOf(cat, a.Unit).Validate; len(cmd) > 0 {
			out = append(out, Validation{Unit: a.Unit, Argv: cmd})
		}
	}
	return out
}
