package layering_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/strata-dev/strata/"

// deps lists the packages pkg links (go list -deps; tests not counted).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestImportRules(t *testing.T) {
	for _, rule := range []struct {
		pkg, why  string
		forbidden []string
	}{
		{"fleet", "the fleet client reads what agents serve through package schema",
			[]string{module + "agent", "github.com/prometheus/"}},
		{"overlay", "the engine opens nodes through the backends registered with package nodestate",
			[]string{module + "internal/nodestate/dirfs", module + "internal/nodestate/overlayfs", module + "internal/nodestate/backends"}},
		{"schema", "the documents nodes report depend on formats and signing only",
			[]string{module + "overlay", module + "node", module + "agent", module + "internal/nodestate"}},
	} {
		for _, d := range deps(t, rule.pkg) {
			for _, f := range rule.forbidden {
				if d == f || strings.HasSuffix(f, "/") && strings.HasPrefix(d, f) {
					t.Errorf("package %s links %s: %s", rule.pkg, d, rule.why)
				}
			}
		}
	}
}
