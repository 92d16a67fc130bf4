package dirfs_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/node/nodetest"
)

// The directory backend passes the shared conformance suite: nodes are
// directories the image is unpacked into.
func TestConformance(t *testing.T) {
	nodetest.Run(t, func(t *testing.T, image string) string {
		root := filepath.Join(t.TempDir(), "node")
		if _, err := builder.Provision(context.Background(), image, root, nil); err != nil {
			t.Fatal(err)
		}
		return root
	})
}
