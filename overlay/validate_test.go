package overlay_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// overlay create runs the validation command of each service its plan
// restarts or reloads, in the line's tree with the change in place
// (a new file, a deleted one, a root-only one it leaves alone), and
// publishes nothing a command refuses; a dry run says the same. Skipping
// takes a reason, which the signed manifest records and repo log shows.
func TestCreateValidates(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t, fixture.WithValidator())
	idx := crIndex(t, f)

	bad := f.Change("/etc/app/app.conf", "port 80\nbad port\n")
	_, err := Create(ctx, f.Repo, f.Key, bad, CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, ErrValidation, "app.service refuses the change", "/usr/bin/app-validate", "app.conf: bad port", "--skip-validation")
	crRefused(t, f, idx)
	_, err = Preview(ctx, f.Repo, bad, CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, ErrValidation, "app.conf: bad port")

	// What the command sees is the head's tree with the change in place.
	good := Change{
		Adds: []Add{
			{Dest: "/etc/app/app.conf", Src: f.HostFile("require /etc/app/conf.d/b.conf\nexpect /etc/app/conf.d/b.conf b\nexpect /etc/app/secret s3cret\nforbid /etc/motd\n")},
			{Dest: "/etc/app/conf.d/b.conf", Src: f.HostFile("b\n")},
		},
		Deletes: []string{"/etc/motd"},
	}
	var steps []string
	note := func(s string) { steps = append(steps, s) }
	p, err := Preview(ctx, f.Repo, good, CreateOptions{Version: "1.0.1", Progress: note})
	if err != nil {
		t.Fatalf("dry run of a valid change: %v", err)
	}
	if len(steps) != 2 || !strings.HasPrefix(steps[0], "staging the tree of test 1.0.1") || steps[1] != "validating app.service: /usr/bin/app-validate" {
		t.Errorf("dry run steps %q", steps)
	}
	want := "app.service: /usr/bin/app-validate"
	if v := p.Validation; v == nil || len(v.Validated) != 1 || v.Validated[0] != want || v.Skipped != "" {
		t.Fatalf("dry run validation %+v, want %q", p.Validation, want)
	}
	// The create that follows finds the same tree and commands validated:
	// it stages nothing again.
	steps = nil
	c, err := Create(ctx, f.Repo, f.Key, good, CreateOptions{Version: "1.0.1", Progress: note})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Validation; v == nil || len(v.Validated) != 1 || v.Validated[0] != want {
		t.Fatalf("create validation %+v, want %q", c.Validation, want)
	}
	if len(steps) != 0 {
		t.Errorf("the create after its dry run staged again: %q", steps)
	}
	if c.Manifest.ValidationSkipped != "" {
		t.Errorf("a validated overlay records a skip: %q", c.Manifest.ValidationSkipped)
	}

	// A change no validating service loads runs nothing.
	c = f.Create("1.0.2", f.Change("/usr/share/doc/readme", "more docs\n"))
	if v := c.Validation; v == nil || len(v.Validated) != 0 {
		t.Errorf("a change of an unclaimed file validated %+v", c.Validation)
	}

	// Skipping needs a reason: one line of printable text.
	idx = crIndex(t, f)
	written, _ := os.ReadDir(filepath.Join(f.Repo, "overlays"))
	for _, reason := range []string{"  ", "two\nlines", strings.Repeat("x", manifests.MaxReasonLen+1)} {
		_, err := Create(ctx, f.Repo, f.Key, bad, CreateOptions{Version: "1.0.3", SkipValidation: reason})
		if !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("--skip-validation %q: %v, want manifests.ErrInvalid", reason, err)
		}
	}
	if now, _ := os.ReadDir(filepath.Join(f.Repo, "overlays")); len(now) != len(written) || string(crIndex(t, f)) != string(idx) {
		t.Error("a create with a bad reason changed the repository")
	}
	reason := "app-validate needs the site's network; checked by hand (ticket 42)"
	c, err = Create(ctx, f.Repo, f.Key, bad, CreateOptions{Version: "1.0.3", SkipValidation: reason})
	if err != nil {
		t.Fatalf("create with --skip-validation: %v", err)
	}
	if c.Manifest.ValidationSkipped != reason || c.Validation.Skipped != reason || len(c.Validation.Validated) != 0 {
		t.Errorf("skipped create: manifest %q, validation %+v", c.Manifest.ValidationSkipped, c.Validation)
	}
	log, err := Log(ctx, f.Repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	es := log.Lines[0].Entries
	if last := es[len(es)-1]; last.Version != "1.0.3" || last.ValidationSkipped != reason {
		t.Errorf("repo log's last entry %+v, want 1.0.3 with the skip reason", last)
	}
	if prev := es[len(es)-2]; prev.ValidationSkipped != "" {
		t.Errorf("repo log shows a skip on %s", prev.Version)
	}
}
