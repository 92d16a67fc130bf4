package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// View is what a node's state directory says about it: its ledger,
// the image manifest it runs and the manifests of the overlays in effect.
// On a trial boot of a staged upgrade the ledger has the upgrade's record
// appended (see nodestate.Node.Effective).
type View struct {
	N      nodestate.Node
	Ledger *manifests.Ledger
	// Image is the image the node runs; Canon the image whose tree the
	// overlays' tree digests fold from (the same unless the node was
	// upgraded to an image of a new recipe).
	Image, Canon *repo.Image
	// ImageSig is the signature of Image's manifest.
	ImageSig []byte
	// Applied are the ledger's records of the overlays in effect, oldest
	// first, and Overlays their stored manifests.
	Applied  []manifests.LedgerEntry
	Overlays []*manifests.OverlayManifest
	// Staged is the staged upgrade, if any; Trial reports a trial boot
	// of it.
	Staged *manifests.StagedUpgrade
	Trial  bool
}

// Load reads the ledger and checks the stored manifests against it.
func Load(n nodestate.Node) (*View, error) {
	ev, err := n.Effective()
	if err != nil {
		return nil, err
	}
	l := ev.Ledger
	v := &View{N: n, Ledger: l, Applied: l.Applied(), Staged: ev.Staged, Trial: ev.Trial}
	run := l.Running()
	if d := manifests.Digest(ev.ImageRaw); d != run.Digest {
		return nil, fmt.Errorf("node %s: /%s has digest %s, but the ledger says the node runs image %s (%s): %w", n.Root, manifests.ImageManifestPath, d, run.Version, run.Digest, nodestate.ErrDrift)
	}
	m, err := DecodeImage(ev.ImageRaw, run.Digest)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	v.Image = &repo.Image{Manifest: m, Raw: ev.ImageRaw, Digest: run.Digest}
	if run.Seq == 0 {
		v.ImageSig, err = safefile.Read(n.Path(manifests.ImageSigPath), sign.MaxSignatureSize)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node %s: %w", n.Root, err)
		}
	} else if _, v.ImageSig, err = n.StoredImage(run.Digest); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	v.Canon = v.Image
	if c := l.Canonical(); c.Digest != run.Digest {
		raw, _, err := n.StoredImage(c.Digest)
		if err != nil {
			return nil, fmt.Errorf("node %s: the line's image %s: %w", n.Root, c.Version, err)
		}
		cm, err := DecodeImage(raw, c.Digest)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Root, err)
		}
		v.Canon = &repo.Image{Manifest: cm, Raw: raw, Digest: c.Digest}
	}
	for _, e := range v.Applied {
		p := filepath.Join(n.ManifestStore(), e.Version+".json")
		b, err := safefile.Read(p, manifests.MaxManifestSize)
		if err != nil {
			return nil, fmt.Errorf("node %s: overlay %s in the ledger: %w", n.Root, e.Version, err)
		}
		if d := manifests.Digest(b); d != e.Digest {
			return nil, fmt.Errorf("node %s: stored manifest of %s has digest %s, ledger says %s: %w", n.Root, e.Version, d, e.Digest, nodestate.ErrDrift)
		}
		var om manifests.OverlayManifest
		if err := manifests.Decode(b, &om); err != nil {
			return nil, fmt.Errorf("node %s: stored manifest %s: %w", p, e.Version, err)
		}
		v.Overlays = append(v.Overlays, &om)
	}
	return v, nil
}

// imageCache keeps decoded image manifests by digest: an apply reloads the
// node's view after each overlay, and the image manifest, which lists every
// file, is by far its largest part. Entries are immutable once decoded.
var imageCache sync.Map // digest -> *manifests.ImageManifest

// DecodeImage decodes the image manifest raw, whose digest is digest,
// once per digest (see imageCache).
func DecodeImage(raw []byte, digest string) (*manifests.ImageManifest, error) {
	if m, ok := imageCache.Load(digest); ok {
		return m.(*manifests.ImageManifest), nil
	}
	var m manifests.ImageManifest
	if err := manifests.Decode(raw, &m); err != nil {
		return nil, err
	}
	imageCache.Store(digest, &m)
	return &m, nil
}

// Head is the node's head after its last record.
func (v *View) Head() manifests.Ref { return v.Ledger.Last().Head }

// Catalog is the service catalog in effect on the node: the newest
// overlay's (an overlay carries the whole catalog of its tree), else the
// image's.
func (v *View) Catalog() manifests.Catalog {
	cat := v.Image.Manifest.Catalog
	for i := len(v.Overlays) - 1; i >= 0; i-- {
		if c := v.Overlays[i].Catalog; c != nil {
			cat = *c
			break
		}
	}
	if !v.Rebased() {
		return cat
	}
	// On an image of a new recipe the overlays' catalog describes the
	// line's tree: the running image's own units join it.
	out := manifests.Catalog{Services: slices.Clone(cat.Services)}
	for _, s := range v.Image.Manifest.Catalog.Services {
		if !slices.ContainsFunc(out.Services, func(o manifests.Service) bool { return o.Unit == s.Unit }) {
			out.Services = append(out.Services, s)
		}
	}
	return out
}

// Expected folds the image and the applied overlays into the tree the node
// should have.
func (v *View) Expected() (tree.State, error) {
	return v.ExpectedAfter(len(v.Overlays))
}

// ExpectedAfter folds the image and the first k applied overlays.
func (v *View) ExpectedAfter(k int) (tree.State, error) {
	return v.Fold(k).State()
}

// Fold is the image with the first k applied overlays as layers.
func (v *View) Fold(k int) *tree.Fold { return foldOver(v.Image, v.Overlays[:k]) }

// CanonFold is the line's tree under the first k applied overlays: what
// their tree digests describe. It is fold unless the node runs an image
// of a new recipe.
func (v *View) CanonFold(k int) *tree.Fold { return foldOver(v.Canon, v.Overlays[:k]) }

// foldOver is image with overlays as layers.
func foldOver(image *repo.Image, overlays []*manifests.OverlayManifest) *tree.Fold {
	f := tree.Base(image.Manifest.Files)
	for _, m := range overlays {
		f = tree.Append(f, archive.ManifestLayer(m))
	}
	return f
}

// Rebased reports whether the node runs an image other than the line's:
// its tree is then not the one the overlays' tree digests describe.
func (v *View) Rebased() bool { return v.Canon.Digest != v.Image.Digest }
