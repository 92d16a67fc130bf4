package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// nodeView is what a node's state directory says about it: its ledger,
// the image manifest it was provisioned from and the manifests of the
// overlays in effect.
type nodeView struct {
	n        node.Node
	ledger   *manifests.Ledger
	image    *repo.Image
	applied  []manifests.LedgerEntry
	overlays []*manifests.OverlayManifest
}

func manifestStore(n node.Node) string { return filepath.Join(n.StateDir(), "overlays") }

func undoDir(n node.Node, version string) string {
	return filepath.Join(n.StateDir(), "undo", version)
}

// loadView reads the ledger and checks the stored manifests against it.
func loadView(n node.Node) (*nodeView, error) {
	l, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	v := &nodeView{n: n, ledger: l, applied: l.Applied()}
	raw, err := os.ReadFile(n.Path(manifests.ImageManifestPath))
	if err != nil {
		return nil, fmt.Errorf("node %s: reading image manifest: %w", n.Root, err)
	}
	if d := manifests.Digest(raw); d != l.Entries[0].Digest {
		return nil, fmt.Errorf("node %s: /%s has digest %s, ledger provisioned %s: %w", n.Root, manifests.ImageManifestPath, d, l.Entries[0].Digest, ErrDrift)
	}
	m, err := decodeImage(raw, l.Entries[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	v.image = &repo.Image{Manifest: m, Raw: raw, Digest: l.Entries[0].Digest}
	for _, e := range v.applied {
		p := filepath.Join(manifestStore(n), e.Version+".json")
		b, err := os.ReadFile(p)
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

// catalog is the service catalog in effect on the node.
func (v *nodeView) catalog() manifests.Catalog {
	for i := len(v.overlays) - 1; i >= 0; i-- {
		if c := v.overlays[i].Catalog; c != nil {
			return *c
		}
	}
	return v.image.Manifest.Catalog
}

// expected folds the image and the applied overlays into the tree the node
// should have.
func (v *nodeView) expected() (tree.State, error) {
	return v.expectedAfter(len(v.overlays))
}

// expectedAfter folds the image and the first k applied overlays.
func (v *nodeView) expectedAfter(k int) (tree.State, error) {
	s := tree.NewState(v.image.Manifest.Files)
	for _, m := range v.overlays[:k] {
		next, err := s.Apply(m.Entries, m.Deletes)
		if err != nil {
			return nil, fmt.Errorf("folding overlay %s: %w", m.Version, err)
		}
		s = next
	}
	return s, nil
}

// recoverNode finishes or undoes a transaction a crash left behind.
func recoverNode(n node.Node) error {
	t, err := loadTxn(n)
	if err != nil || t == nil {
		return err
	}
	if t.j.Record.Action == "" {
		return os.RemoveAll(t.dir)
	}
	l, err := n.ReadLedger()
	if err != nil {
		return err
	}
	last := l.Last()
	r := t.j.Record
	if last.Seq == r.Seq && last.Action == r.Action && last.Version == r.Version && last.Digest == r.Digest {
		return t.finish()
	}
	if err := t.undo(); err != nil {
		return fmt.Errorf("node %s: rolling back an interrupted %s of %s: %w", n.Root, r.Action, r.Version, err)
	}
	return os.RemoveAll(t.dir)
}

// finish keeps what a committed transaction displaced: an apply's old
// objects become the overlay's undo data; a rollback's are dropped along
// with the undo data it consumed.
func (t *txn) finish() error {
	r := t.j.Record
	_ = os.RemoveAll(filepath.Join(t.dir, "new"))
	if r.Action == manifests.LedgerApply {
		dst := undoDir(t.n, r.Version)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		_ = os.RemoveAll(dst)
		return os.Rename(t.dir, dst)
	}
	if err := os.RemoveAll(undoDir(t.n, r.Version)); err != nil {
		return err
	}
	for _, suffix := range []string{".json", ".json.minisig"} {
		if err := os.Remove(filepath.Join(manifestStore(t.n), r.Version+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.RemoveAll(t.dir)
}

// lockNode takes the node's apply lock and finishes or undoes whatever
// transaction a crash left, so the caller starts from a settled node.
func lockNode(ctx context.Context, root string, wait time.Duration) (node.Node, func(), error) {
	n := node.Node{Root: root}
	unlock, err := n.Lock(ctx, wait)
	if err != nil {
		return n, nil, err
	}
	if err := recoverNode(n); err != nil {
		unlock()
		return n, nil, err
	}
	return n, unlock, nil
}
