package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/strata-dev/strata"

// goList returns the packages matching pattern with their imports.
func goList(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs[f[0]] = f[1:]
	}
	return pkgs
}

// TestDependencyRules enforces the layering docs/overview.md describes.
func TestDependencyRules(t *testing.T) {
	pkgs := goList(t, module+"/...")
	if len(pkgs) < 8 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for pkg, imports := range pkgs {
		for _, imp := range imports {
			// manifests is the schema package: it imports no other strata package.
			if pkg == module+"/manifests" && strings.HasPrefix(imp, module) {
				t.Errorf("manifests imports %s; it must import no strata package", imp)
			}
			// Only the command knows about cobra.
			if strings.HasPrefix(imp, "github.com/spf13/") && pkg != module+"/cmd/strata" {
				t.Errorf("%s imports %s; only cmd/strata may", pkg, imp)
			}
			// internal packages never reach up into the feature packages.
			if strings.HasPrefix(pkg, module+"/internal/") &&
				(imp == module+"/overlay" || imp == module+"/node" || imp == module+"/builder" || imp == module+"/cmd/strata") {
				t.Errorf("%s imports %s; internal packages sit below the feature packages", pkg, imp)
			}
			// The disk package builds on builder, never the other way.
			if pkg == module+"/builder" && imp == module+"/builder/disk" {
				t.Errorf("builder imports %s; builder/disk sits above builder", imp)
			}
			// builder folds chains through internal/repo and internal/tree;
			// overlay (the apply engine) sits beside it, not below it.
			if (pkg == module+"/builder" || strings.HasPrefix(pkg, module+"/builder/")) && imp == module+"/overlay" {
				t.Errorf("%s imports %s; builder loads chains through internal/repo", pkg, imp)
			}
			// Nothing imports the command.
			if imp == module+"/cmd/strata" {
				t.Errorf("%s imports the command package", pkg)
			}
		}
	}
}

// TestLinkRules enforces the seams docs/code-map.md draws, on everything a
// package links (go list -deps), not only what it imports itself.
func TestLinkRules(t *testing.T) {
	for _, rule := range []struct {
		pkg, why  string
		forbidden []string
	}{
		{"fleet", "the fleet client reads what agents serve through package schema",
			[]string{module + "/agent", "github.com/prometheus/"}},
		{"node", "the engine opens nodes through the backends registered with package nodestate and restarts through the Restarter it is given, and links neither the publisher nor the squashfs tools",
			[]string{module + "/internal/nodestate/dirfs", module + "/internal/nodestate/overlayfs", module + "/internal/nodestate/backends", module + "/node/restarter", module + "/overlay", module + "/internal/squashfs"}},
		{"overlay", "the publisher does not link the node engine",
			[]string{module + "/node", module + "/internal/nodestate/dirfs", module + "/internal/nodestate/overlayfs"}},
		{"schema", "the documents nodes report depend on formats and signing only",
			[]string{module + "/overlay", module + "/node", module + "/agent", module + "/internal/nodestate"}},
	} {
		out, err := exec.Command("go", "list", "-deps", module+"/"+rule.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", rule.pkg, err)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, f := range rule.forbidden {
				if d == f || strings.HasSuffix(f, "/") && strings.HasPrefix(d, f) {
					t.Errorf("package %s links %s: %s", rule.pkg, d, rule.why)
				}
			}
		}
	}
}
