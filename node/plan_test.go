package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// Removing a unit stops it (after a daemon-reload); rolling the removal
// back restarts it. Restarting a unit that no longer exists would fail and
// make every removal roll itself back.
func TestRemovedUnitIsStoppedAndRollbackRestartsIt(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", overlay.Change{Deletes: []string{"/usr/lib/systemd/system/other.service"}})
	var got []manifests.ServiceAction
	for _, s := range c.Manifest.Services {
		if s.Unit == "other.service" {
			got = append(got, s)
		}
	}
	if len(got) != 1 || got[0].Action != manifests.ActionStop || !got[0].DaemonReload {
		t.Fatalf("plan for a removed unit = %+v, want stop after daemon-reload", c.Manifest.Services)
	}
	root := f.Provision()
	log := filepath.Join(t.TempDir(), "log")
	r := restarter.Exec{Template: "echo {unit} {action} >> " + log}
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{Restarter: r}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{Restarter: r}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := " daemon-reload\nother.service stop\n daemon-reload\nother.service restart\n"
	if string(b) != want {
		t.Fatalf("restart log:\n%s\nwant:\n%s", b, want)
	}
}

// A drop-in directory replaced by a file still counts its old drop-ins as
// changed, so the unit is daemon-reloaded and restarted.
func TestReplacedDirectoryChildrenCountAsChanged(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/conf.d", "not a directory any more\n"))
	var reasons []string
	for _, s := range c.Manifest.Services {
		if s.Unit == "app.service" {
			reasons = s.Because
		}
	}
	if !strings.Contains(strings.Join(reasons, " "), "etc/app/conf.d/a.conf") {
		t.Fatalf("app.service reasons %v should include the removed etc/app/conf.d/a.conf (services %+v)", reasons, c.Manifest.Services)
	}
}

// Forcing a restart of a unit the tree does not define (one generated at
// boot, say) keeps it a restart: only units whose definition the change
// removes are stopped.
func TestForcedRestartOfExternalUnitStaysRestart(t *testing.T) {
	f := fixture.New(t)
	ch := f.Change("/etc/motd", "hi\n")
	ch.Restart = []string{"generated.service", "getty@tty1.service"}
	ch.AllowUnknownUnits = true // generated at boot: the catalog cannot know it
	c := f.Create("1.0.1", ch)
	for _, s := range c.Manifest.Services {
		if s.Action != manifests.ActionRestart {
			t.Errorf("%s: %s, want restart", s.Unit, s.Action)
		}
	}
	if len(c.Manifest.Services) != 2 {
		t.Fatalf("services %+v, want the two forced restarts", c.Manifest.Services)
	}
}
