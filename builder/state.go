package builder

import (
	"context"

	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"

	"github.com/strata-dev/strata/internal/nodestate"
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
	nd := nodestate.Node{Root: dir}
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
	if sig, err := safefile.Read(repo.SigPath(repo.ManifestPath(image)), sign.MaxSignatureSize); err == nil {
		if err := safefile.WriteAtomic(nd.Path(manifests.ImageSigPath), sig, 0o644); err != nil {
			return nil, err
		}
	}
	if err := nd.SetBackend(nodestate.BackendOverlayfs); err != nil {
		return nil, err
	}
	if err := nd.WriteLedger(l); err != nil {
		return nil, err
	}
	return l, nil
}

// ProvisionState verifies image (against trust; nil: the keys it lists)
// and writes the state of a node that boots it into dir (see WriteState):
// the node runs the image read-only, dir's var on its /var, its managed
// hierarchies stacked by strata activate. The image must have /var and
// /run directories to mount them on.
func ProvisionState(ctx context.Context, image, dir string, trust *sign.KeySet) (*manifests.LedgerEntry, error) {
	im, err := repo.LoadImage(image, trust)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range im.Manifest.Files {
		if e.Type == manifests.TypeDir {
			have[e.Path] = true
		}
	}
	for _, d := range []string{"var", "run"} {
		if !have[d] {
			return nil, fmt.Errorf("provisioning state for %s: the image has no /%s directory to mount the node's on: %w", image, d, ErrRecipe)
		}
	}
	l, err := WriteState(image, im, dir)
	if err != nil {
		return nil, err
	}
	last := l.Last()
	return &last, nil
}
