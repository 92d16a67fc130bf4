package node_test

import (
	"context"
	"testing"

	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
)

// The engine's tests start from the shared fixture (package fixture): a
// small signed image with two services in the tar image form and a
// repository at it, so they need no squashfs tools.

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
