package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// nodeView is what a node's state directory says about it: its ledger,
// the image manifest it runs and the manifests of the overlays in effect.
// On a trial boot of a staged upgrade the ledger has the upgrade's record
// appended (see nodestate.Node.Effective).
type nodeView struct {
	n      nodestate.Node
	ledger *manifests.Ledger
	// image is the image the node runs; canon the image whose tree the
	// overlays' tree digests fold from (the same unless the node was
	// upgraded to an image of a new recipe).
	image, canon *repo.Image
	// imageSig is the signature of image's manifest.
	imageSig []byte
	applied  []manifests.LedgerEntry
	overlays []*manifests.OverlayManifest
	staged   *manifests.StagedUpgrade
	trial    bool
}

// loadView reads the ledger and checks the stored manifests against it.
func loadView(n nodestate.Node) (*nodeView, error) {
	ev, err := n.Effective()
	if err != nil {
		return nil, err
	}
	l := ev.Ledger
	v := &nodeView{n: n, ledger: l, applied: l.Applied(), staged: ev.Staged, trial: ev.Trial}
	run := l.Running()
	if d := manifests.Digest(ev.ImageRaw); d != run.Digest {
		return nil, fmt.Errorf("node %s: /%s has digest %s, but the ledger says the node runs image %s (%s): %w", n.Root, manifests.ImageManifestPath, d, run.Version, run.Digest, ErrDrift)
	}
	m, err := decodeImage(ev.ImageRaw, run.Digest)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	v.image = &repo.Image{Manifest: m, Raw: ev.ImageRaw, Digest: run.Digest}
	if run.Seq == 0 {
		v.imageSig, err = safefile.Read(n.Path(manifests.ImageSigPath), sign.MaxSignatureSize)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node %s: %w", n.Root, err)
		}
	} else if _, v.imageSig, err = n.StoredImage(run.Digest); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	v.canon = v.image
	if c := l.Canonical(); c.Digest != run.Digest {
		raw, _, err := n.StoredImage(c.Digest)
		if err != nil {
			return nil, fmt.Errorf("node %s: the line's image %s: %w", n.Root, c.Version, err)
		}
		cm, err := decodeImage(raw, c.Digest)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Root, err)
		}
		v.canon = &repo.Image{Manifest: cm, Raw: raw, Digest: c.Digest}
	}
	for _, e := range v.applied {
		p := filepath.Join(n.ManifestStore(), e.Version+".json")
		b, err := safefile.Read(p, manifests.MaxManifestSize)
		if err != nil {
			return nil, fmt.Errorf("node %s: overlay %s in the ledger: %w", n.Root, e.Version, err)
		}
		if d := manifests.Digest(b); d != e.Digest {
			return nil, fmt.Errorf("node %s: stored manifest of %s has digest %s, ledger says %s: %w", n.Root, e.Version, d, e.Digest, ErrDrift)
		}
		var om manifests.OverlayManifest
		if err := manifests.Decode(b, &om); err != nil {
			return nil, fmt.Errorf("node %s: stored manifest %s: %w", p, e.Version, err)
		}
		v.overlays = append(v.overlays, &om)
	}
	return v, nil
}

// imageCache keeps decoded image manifests by digest: an apply reloads the
// node's view after each overlay, and the image manifest, which lists every
// file, is by far its largest part. Entries are immutable once decoded.
var imageCache sync.Map // digest -> *manifests.ImageManifest

func decodeImage(raw []byte, digest string) (*manifests.ImageManifest, error) {
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

// head is the node's head after its last record.
func (v *nodeView) head() manifests.Ref { return v.ledger.Last().Head }

// catalog is the service catalog in effect on the node: the newest
// overlay's (an overlay carries the whole catalog of its tree), else the
// image's.
func (v *nodeView) catalog() manifests.Catalog {
	cat := v.image.Manifest.Catalog
	for i := len(v.overlays) - 1; i >= 0; i-- {
		if c := v.overlays[i].Catalog; c != nil {
			cat = *c
			break
		}
	}
	if !v.rebased() {
		return cat
	}
	// On an image of a new recipe the overlays' catalog describes the
	// line's tree: the running image's own units join it.
	out := manifests.Catalog{Services: slices.Clone(cat.Services)}
	for _, s := range v.image.Manifest.Catalog.Services {
		if !slices.ContainsFunc(out.Services, func(o manifests.Service) bool { return o.Unit == s.Unit }) {
			out.Services = append(out.Services, s)
		}
	}
	return out
}

// expected folds the image and the applied overlays into the tree the node
// should have.
func (v *nodeView) expected() (tree.State, error) {
	return v.expectedAfter(len(v.overlays))
}

// expectedAfter folds the image and the first k applied overlays.
func (v *nodeView) expectedAfter(k int) (tree.State, error) {
	return v.fold(k).State()
}

// fold is the image with the first k applied overlays as layers.
func (v *nodeView) fold(k int) *tree.Fold { return foldOver(v.image, v.overlays[:k]) }

// canonFold is the line's tree under the first k applied overlays: what
// their tree digests describe. It is fold unless the node runs an image
// of a new recipe.
func (v *nodeView) canonFold(k int) *tree.Fold { return foldOver(v.canon, v.overlays[:k]) }

// foldOver is image with overlays as layers.
func foldOver(image *repo.Image, overlays []*manifests.OverlayManifest) *tree.Fold {
	f := tree.Base(image.Manifest.Files)
	for _, m := range overlays {
		f = tree.Append(f, archive.ManifestLayer(m))
	}
	return f
}

// rebased reports whether the node runs an image other than the line's:
// its tree is then not the one the overlays' tree digests describe.
func (v *nodeView) rebased() bool { return v.canon.Digest != v.image.Digest }

// lockBackend takes the node's apply lock and settles whatever a crash
// left, so the caller starts from a settled node.
func lockBackend(ctx context.Context, b nodestate.Backend, root string, wait time.Duration, progress func(string)) (func(), error) {
	unlock, err := b.Node().Lock(ctx, wait)
	if err != nil {
		return nil, err
	}
	if b.Node().ReadOnly() {
		// A read-only check of an offline disk: nothing is settled,
		// and a transaction to settle refuses the check.
		if err := refuseInterrupted(b, root); err != nil {
			unlock()
			return nil, err
		}
		return unlock, nil
	}
	if err := recoverTxn(ctx, b, progress); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// refuseInterrupted returns ErrInterrupted (with ErrDrift) when the
// node has a transaction a crash interrupted, which a run that changes
// the node settles first.
func refuseInterrupted(b nodestate.Backend, root string) error {
	what, err := b.Interrupted()
	if err != nil {
		return err
	}
	if what != "" {
		return fmt.Errorf("node %s: %s; any strata run that changes the node (apply-overlay without --dry-run, rollback, restart, gc) finishes it first: %w: %w", root, what, ErrDrift, ErrInterrupted)
	}
	return nil
}

// recoverTxn has the backend recover from a crash. An apply it took back
// while its services were being restarted is recorded as failed, with its
// restarts due: the services may have seen the change. The temporary
// files interrupted writes of node state left are removed, and progress
// (if not nil) is told which.
func recoverTxn(ctx context.Context, b nodestate.Backend, progress func(string)) error {
	n := b.Node()
	strays, err := n.RemoveStrays()
	if err != nil {
		return err
	}
	if len(strays) > 0 && progress != nil {
		progress(fmt.Sprintf("removed %d temporary files interrupted writes of node state left: %s", len(strays), strings.Join(strays, " ")))
	}
	l, err := n.ReadLedger()
	if err != nil {
		return err
	}
	undone, err := b.Recover(ctx, l)
	if err != nil {
		return err
	}
	restarting, err := n.Restarting()
	if err != nil {
		return err
	}
	if undone != nil && undone.Action == manifests.LedgerApply && restarting == undone.Version {
		if l, err = n.Commit(l, failedRecord(l, *undone, "interrupted while its services restarted", undone.Pending)); err != nil {
			return err
		}
	}
	// Only the manifests of the overlays in effect stay: a rollback that
	// committed before a crash, or an apply that never did, leaves one.
	var keep []string
	for _, e := range l.Applied() {
		keep = append(keep, e.Version)
	}
	if err := n.PruneManifests(keep); err != nil {
		return err
	}
	return n.ClearRestarting()
}

// failedRecord records that the overlay of attempt was taken back.
func failedRecord(l *manifests.Ledger, attempt manifests.LedgerEntry, why string, pending []manifests.ServiceAction) manifests.LedgerEntry {
	last := l.Last()
	return manifests.LedgerEntry{
		Action: manifests.LedgerFailed, Line: attempt.Line, Version: attempt.Version, Digest: attempt.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest,
		Pending: pending, Error: why, Signer: attempt.Signer, Time: time.Now().UTC().Format(time.RFC3339),
	}
}
