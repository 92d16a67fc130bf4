package restarter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

// Whatever quoting an exec: template puts around {unit}, the value is
// never parsed by the shell: a unit name carrying a command substitution
// (which Act would refuse first) stays text in every quoting context. (A
// template that evals re-parses whatever it is given; there only the
// unit-name check, which admits no shell metacharacter, stands.)
func TestExecTemplateNeverParsesValues(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	canary := filepath.Join(dir, "pwned")
	// No blanks: in a double-quoted context the expansion is unquoted
	// and would split at them (unit names have none).
	hostile := "$(touch${IFS}" + canary + ")`touch${IFS}" + canary + "`'\"$(touch${IFS}" + canary + ")\".service"
	for _, tmpl := range []string{
		`printf '%s\n' {unit} >> ` + log,
		`printf '%s\n' "{unit}" >> ` + log,
		`printf '%s\n' "x{unit}x" >> ` + log,
		`printf '%s\n' '{unit}' >> ` + log,
	} {
		if err := (Exec{Template: tmpl}).run(context.Background(), hostile, manifests.ActionRestart); err != nil {
			t.Fatalf("%s: %v", tmpl, err)
		}
		if _, err := os.Stat(canary); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("template %s ran a command from the unit name", tmpl)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != hostile || lines[1] != hostile || lines[2] != "x"+hostile+"x" || lines[3] != `"${STRATA_UNIT}"` {
		t.Errorf("the value did not arrive as text:\n%s", b)
	}
	// Act refuses what is not a unit name, and unknown actions.
	for _, c := range []struct {
		unit   string
		action manifests.Action
	}{{hostile, manifests.ActionRestart}, {"--host=evil", manifests.ActionRestart}, {"a.service", "kill"}} {
		if err := (Exec{Template: "true"}).act(context.Background(), c.unit, c.action); !errors.Is(err, node.ErrRestart) {
			t.Errorf("Act(%q, %q) = %v, want a refusal", c.unit, c.action, err)
		}
	}
}
