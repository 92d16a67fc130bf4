package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make install PREFIX=... puts the binary, a man page per command and the
// shell completions where the system looks for them.
func TestMakeInstall(t *testing.T) {
	prefix := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-C", root, "install", "PREFIX="+prefix, "BIN="+filepath.Join(t.TempDir(), "strata"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(prefix, "bin", "strata"), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "strata ") {
		t.Fatalf("installed strata version: %q %v", out, err)
	}
	for _, p := range []string{"share/man/man1/strata.1", "share/man/man1/strata-apply-overlay.1", "share/man/man1/strata-overlay-revert.1"} {
		b, err := os.ReadFile(filepath.Join(prefix, p))
		if err != nil || !strings.Contains(string(b), ".TH \"STRATA\" \"1\"") {
			t.Errorf("%s: %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"share/bash-completion/completions/strata":    "__start_strata",
		"share/zsh/site-functions/_strata":            "#compdef strata",
		"share/fish/vendor_completions.d/strata.fish": "complete -c strata",
	} {
		b, err := os.ReadFile(filepath.Join(prefix, p))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %v, want it to contain %q", p, err, want)
		}
	}
	// man reads the installed page (man-db: scripts/deps.sh).
	page, err := exec.Command("man", "-l", filepath.Join(prefix, "share/man/man1/strata-repo-log.1")).Output()
	if err != nil || !strings.Contains(string(page), "strata repo log REPO") {
		t.Errorf("man -l strata-repo-log.1: %v\n%s", err, page)
	}
}
