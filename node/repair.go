package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/audit"
	"github.com/strata-dev/strata/node/internal/view"
)

// ErrRepair reports drift a repair cannot undo.
var ErrRepair = manifests.Rejection("repair incomplete")

// RepairReport describes a repair.
type RepairReport struct {
	Root string `json:"root"`
	// Drift lists what the file audit found before the repair.
	Drift []string `json:"drift"`
	// Layers are the layers rebuilt from their overlays.
	Layers []string `json:"layers"`
}

// Repair restores the node's managed tree to its head where it drifted
// (what verify-sequence --files names), with the overlays from src (a
// repository or a bundle holding the node's applied overlays): each
// overlay is checked against the digest the node's ledger recorded when
// it applied it and against the node's keys, and each layer a drifted
// path lies in is written anew from its overlay (patched files rebuilt
// from the content below them, from the repository or the node's
// read-only image) and exchanged atomically for the drifted one. A repair
// record naming the layers is appended to the ledger; then the audit must
// pass. The head does not change; restarting the services that use the
// repaired files is the caller's (strata restart --repair). Only nodes that boot a read-only image (the overlayfs
// backend) can be repaired: a plain directory tree has no pristine copy
// to compare layers with.
func (h *Node) Repair(ctx context.Context, src Source) (*RepairReport, error) {
	progress, b, root := h.o.Progress, h.b, h.root
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := refuseStaged(b.Node(), "repair"); err != nil {
		return nil, err
	}
	lr, ok := b.(nodestate.LayerRebuilder)
	if !ok {
		return nil, fmt.Errorf("repairing %s: %w: only nodes on a read-only image (backend overlayfs) can be repaired", root, errors.ErrUnsupported)
	}
	n := b.Node()
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	want, err := v.Expected()
	if err != nil {
		return nil, err
	}
	got, err := b.Scan(ctx)
	if err != nil {
		return nil, err
	}
	rep := &RepairReport{Root: root, Drift: []string{}, Layers: []string{}}
	drift := audit.Drift(want, audit.Comparable(got, want, v.Image.Manifest.IsData))
	for _, d := range drift {
		rep.Drift = append(rep.Drift, d.Msg)
	}
	badLayers, err := lr.CheckLayers(ctx)
	if err != nil {
		return nil, err
	}
	bad := map[string]bool{}
	for _, p := range badLayers {
		rep.Drift = append(rep.Drift, p.Msg)
		bad[p.Version] = true
	}
	if len(drift) == 0 && len(badLayers) == 0 {
		return rep, nil
	}
	// The layers to rebuild: those whose image differs from its record,
	// those whose overlay writes or deletes a drifted path (or a parent
	// of it), and those holding one.
	var todo []int
	claimed := map[string]bool{}
	for i, m := range v.Overlays {
		hit := bad[m.Version]
		for _, d := range drift {
			if touches(m, d.Path) || lr.LayerHas(m.Version, d.Path) {
				hit, claimed[d.Path] = true, true
			}
		}
		if hit {
			todo = append(todo, i)
		}
	}
	var orphans []string
	for _, d := range drift {
		if !claimed[d.Path] {
			orphans = append(orphans, "/"+d.Path)
		}
	}
	if len(orphans) > 0 {
		return rep, fmt.Errorf("repairing %s: %w: %s drifted but no overlay's layer holds it (the image itself differs: upgrade or reprovision the node)", root, ErrRepair, strings.Join(orphans, ", "))
	}
	trust, err := n.TrustedKeys()
	if err != nil {
		return nil, err
	}
	st, done, err := repo.LocateForRereads(src.Repo, src.Store)
	if err != nil {
		return nil, err
	}
	defer done()
	arcs, err := appliedArchives(ctx, v, st, src.Repo, trust)
	if err != nil {
		return rep, err
	}
	// Every overlay and every patch base is read and checked before the
	// first layer changes: a repository that cannot serve them all
	// changes nothing.
	for _, i := range todo {
		progress(fmt.Sprintf("verifying overlay %s", v.Overlays[i].Version))
		a, err := arcs.at(ctx, i)
		if err != nil {
			return rep, err
		}
		if err := a.Payload(ctx, arcs.bases(i, lr.ImageDir()), func(manifests.Entry, io.Reader) error { return nil }); err != nil {
			return rep, err
		}
	}
	for _, i := range todo {
		m := v.Overlays[i]
		progress(fmt.Sprintf("rebuilding layer %s", m.Version))
		before, err := v.ExpectedAfter(i)
		if err != nil {
			return rep, err
		}
		after, err := v.ExpectedAfter(i + 1)
		if err != nil {
			return rep, err
		}
		a, err := arcs.at(ctx, i)
		if err != nil {
			return rep, err
		}
		bases := arcs.bases(i, lr.ImageDir())
		payload := func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error {
			return a.Payload(ctx, bases, fn)
		}
		if err := lr.RebuildLayer(ctx, &nodestate.Change{Manifest: m, Payload: payload, Record: v.Applied[i], Before: before, After: after}); err != nil {
			return rep, err
		}
		rep.Layers = append(rep.Layers, m.Version)
	}
	if got, err = b.Scan(ctx); err != nil {
		return rep, err
	}
	left := audit.Drift(want, audit.Comparable(got, want, v.Image.Manifest.IsData))
	stillBad, err := lr.CheckLayers(ctx)
	if err != nil {
		return rep, err
	}
	for _, p := range stillBad {
		left = append(left, audit.Drifted{Path: p.Path, Msg: p.Msg})
	}
	// The ledger says what was rebuilt, whether or not it was enough.
	last := v.Ledger.Last()
	if _, err := n.Commit(v.Ledger, manifests.LedgerEntry{
		Action: manifests.LedgerRepair, Line: last.Line, Version: last.Head.Version, Digest: last.Head.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Repaired: rep.Layers,
		Time: time.Now().UTC().Format(time.RFC3339),
	}); err != nil {
		return rep, err
	}
	if len(left) > 0 {
		var msgs []string
		for _, d := range left {
			msgs = append(msgs, d.Msg)
		}
		return rep, fmt.Errorf("repairing %s: %w: still drifted after rebuilding layers %v: %s", root, ErrRepair, rep.Layers, strings.Join(msgs, "; "))
	}
	return rep, nil
}

// touches reports whether m writes or deletes p or a parent of p.
func touches(m *manifests.OverlayManifest, p string) bool {
	for _, e := range m.Entries {
		if e.Path == p {
			return true
		}
	}
	for _, d := range m.Deletes {
		if manifests.Within(p, d) {
			return true
		}
	}
	return false
}

// appliedSet is the node's applied overlays as the repository has them,
// each opened on first use.
type appliedSet struct {
	v     *view.View
	r     *repo.Repo
	refs  map[string]manifests.OverlayRef
	trust *sign.KeySet
	open  map[int]*archive.Archive
	loc   string
}

// appliedArchives opens the repository in st for the node of v and indexes
// its line's overlays by version.
func appliedArchives(ctx context.Context, v *view.View, st repo.Store, loc string, trust *sign.KeySet) (*appliedSet, error) {
	line := v.Ledger.Entries[0].Line
	r, err := repo.OpenAt(ctx, st, trust, repo.Position{Line: line, Head: v.Head()})
	if err != nil {
		return nil, err
	}
	l, err := r.Index.Find(line)
	if err != nil {
		return nil, err
	}
	if err := r.Expand(ctx, l); err != nil {
		return nil, err
	}
	s := &appliedSet{v: v, r: r, refs: map[string]manifests.OverlayRef{}, trust: trust, open: map[int]*archive.Archive{}, loc: loc}
	for _, ref := range l.Overlays {
		s.refs[ref.Version] = ref
	}
	return s, nil
}

// at opens the i-th applied overlay: the repository's file must be the
// one the node applied (the digest its ledger recorded).
func (s *appliedSet) at(ctx context.Context, i int) (*archive.Archive, error) {
	if a := s.open[i]; a != nil {
		return a, nil
	}
	e := s.v.Applied[i]
	ref, ok := s.refs[e.Version]
	if !ok {
		return nil, fmt.Errorf("repository %s has no overlay %s, which the node applied: %w", s.loc, e.Version, ErrRepair)
	}
	a, err := repo.OpenIndexed(ctx, s.r, ref, s.trust)
	if err != nil {
		return nil, fmt.Errorf("overlay %s from %s: %w", e.Version, s.loc, err)
	}
	if a.Digest != e.Digest {
		return nil, fmt.Errorf("overlay %s in %s is %s, the node applied %s: %w", e.Version, s.loc, a.Digest, e.Digest, ErrSequence)
	}
	s.open[i] = a
	return a, nil
}

// bases gives the patches of the i-th applied overlay the content below
// it: from the newest earlier overlay writing the path (fetched and
// rebuilt the same way), else the node's read-only image at image.
func (s *appliedSet) bases(i int, image string) tree.Bases {
	return func(ctx context.Context, path, sum string) ([]byte, error) {
		for j := i - 1; j >= 0; j-- {
			if s.v.Overlays[j].Carries(path) {
				a, err := s.at(ctx, j)
				if err != nil {
					return nil, err
				}
				return a.File(ctx, s.bases(j, image), path)
			}
		}
		b, err := safefile.ReadBeneath(image, path, manifests.MaxPatchTarget)
		if err != nil {
			return nil, fmt.Errorf("reading /%s from the node's image: %w", path, err)
		}
		if manifests.Digest(b) != manifests.DigestPrefix+sum {
			return nil, fmt.Errorf("the node's image has other content at /%s than the patch was made against: %w", path, ErrRepair)
		}
		return b, nil
	}
}
