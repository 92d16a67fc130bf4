package builder

import (
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// WriteState writes the state of a node that boots image (verified as
// im) into dir, which stands for the node's state partition: its
// var/lib/strata holds the ledger (one provision record), the image
// manifest's signature and the backend, overlayfs, since such a node runs
// the image read-only with its managed hierarchies stacked. The node
// binds dir/var onto its /var.
func WriteState(image string, im *repo.Image, dir string) (*manifests.Ledger, error) {
	nd := node.Node{Root: dir}
	if err := os.MkdirAll(nd.StateDir(), 0o755); err != nil {
		return nil, fmt.Errorf("writing node state in %s: %w", dir, err)
	}
	if _, err := os.Lstat(nd.Path(manifests.LedgerPath)); err == nil {
		return nil, fmt.Errorf("writing node state in %s: a ledger exists already", dir)
	}
	l, err := ProvisionLedger(im)
	if err != nil {
		return nil, err
	}
	if sig, err := os.ReadFile(repo.SigPath(repo.ManifestPath(image))); err == nil {
		if err := node.WriteFileAtomic(nd.Path(manifests.ImageSigPath), sig, 0o644); err != nil {
			return nil, err
		}
	}
	if err := nd.SetBackend(node.BackendOverlayfs); err != nil {
		return nil, err
	}
	if err := nd.WriteLedger(l); err != nil {
		return nil, err
	}
	return l, nil
}
