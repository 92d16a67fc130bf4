package overlay_test

import (
	"context"
	"testing"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// The shared fixture (package fixture) gives each test a small signed
// image with two services and a repository at it, in the tar image form:
// these tests need no squashfs tools.

// apply applies files to root with no restarter.
func apply(root string, files ...string) (*node.ApplyReport, error) {
	return nodetest.Apply(context.Background(), root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{})
}

// member is one tar member of an overlay archive.
type member = archivetest.Member

// craft writes an overlay archive at path (see archivetest.Craft).
func craft(t *testing.T, path string, m *manifests.OverlayManifest, key *sign.Key, members []member) []byte {
	t.Helper()
	return archivetest.Craft(t, path, m, key, members)
}

func TestFixtureRoundTrip(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	rep, err := apply(root, c.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Plans) != 1 || len(rep.Plans[0].Actions) != 1 || rep.Plans[0].Actions[0].Unit != "app.service" {
		t.Fatalf("plan = %+v, want a restart of app.service", rep.Plans)
	}
	a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{Repo: f.Repo, Files: true})
	if err != nil || !a.OK() {
		t.Fatalf("verify: %v %+v", err, a)
	}
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Fatalf("node digest differs from the manifest's tree_digest")
	}
}

// applyForce is apply with ApplyOptions.Force: what was changed on the
// node is overwritten (what the drift checks after it must still catch).
func applyForce(root string, files ...string) (*node.ApplyReport, error) {
	return nodetest.Apply(context.Background(), root, node.Source{Files: files}, node.ApplyOptions{Force: true}, node.Options{})
}
