package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/tests/fixture"
)

// Issue 22, validation on every path, from the command line: overlay
// create runs the service's validation command (the fixture's
// app-validate, in a squashfs image) and publishes nothing it refuses,
// naming the unit, the command's output and the way out; --dry-run shows
// the same verdict, and a pass; --skip-validation takes a reason that
// repo log and overlay inspect show.
func TestCLIValidatesOverlays(t *testing.T) {
	f := fixture.New(t, fixture.WithValidator(), fixture.Squashfs())
	bad := filepath.Join(f.Dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("bad listen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	create := []string{"overlay", "create", "--repo", f.Repo, "--version", "1.0.1", "--add", "/etc/app/app.conf=" + bad}
	for _, extra := range [][]string{{"--dry-run"}, {"--key", f.KeyPath}} {
		out, code := strata(append(create, extra...)...)
		if code != 3 || !strings.Contains(out, "app.service refuses the change") || !strings.Contains(out, "exit status 1:\n  | app.conf: bad listen\n") || !strings.Contains(out, "--skip-validation") {
			t.Fatalf("overlay create %v of a bad config: exit %d, want 3 naming the unit, its output and --skip-validation:\n%s", extra, code, out)
		}
	}
	if des, _ := os.ReadDir(filepath.Join(f.Repo, "overlays")); len(des) != 0 {
		t.Fatalf("a refused create wrote %v", des)
	}

	good := filepath.Join(f.Dir, "good.conf")
	if err := os.WriteFile(good, []byte("expect /etc/app/secret s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := strata("overlay", "create", "--repo", f.Repo, "--version", "1.0.1", "--add", "/etc/app/app.conf="+good, "--dry-run")
	if code != 0 || !strings.Contains(out, "validation: passed (1):\n  app.service: /usr/bin/app-validate") {
		t.Fatalf("dry run of a good config: exit %d, want the validation shown:\n%s", code, out)
	}

	reason := "checked by hand on the staging node"
	out, code = strata(append(create, "--key", f.KeyPath, "--skip-validation", reason)...)
	if code != 0 || !strings.Contains(out, "validation: skipped ("+reason+")") || !strings.Contains(out, "validation skipped by the publisher: "+reason) {
		t.Fatalf("create with --skip-validation: exit %d:\n%s", code, out)
	}
	out, code = strata("repo", "log", f.Repo)
	if code != 0 || !strings.Contains(out, `validation skipped: "`+reason+`"`) {
		t.Fatalf("repo log does not show the skip (exit %d):\n%s", code, out)
	}
}
