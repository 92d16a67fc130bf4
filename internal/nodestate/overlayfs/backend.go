package overlayfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// ErrOutside reports a change outside the node's managed hierarchies.
var ErrOutside = manifests.Rejection("overlayfs: path outside the managed hierarchies")

// Backend changes a node whose managed hierarchies are overlayfs stacks.
type Backend struct {
	n    nodestate.Node
	run  string
	hier []string

	mu      sync.Mutex
	written map[string]*kept // by version: see keep
}

// Option configures a Backend.
type Option func(*Backend)

// WithRun sets the runtime directory (default ROOT/run) below which the
// image clone is mounted (RUN/strata/image). An initramfs passes its own
// /run, which becomes the node's /run after the switch to the root.
func WithRun(dir string) Option { return func(b *Backend) { b.run = dir } }

// WithHierarchies sets the managed hierarchies (tree paths of top-level
// directories; default manifests.DefaultHierarchies).
func WithHierarchies(h []string) Option { return func(b *Backend) { b.hier = h } }

// New returns the backend of node n.
func New(n nodestate.Node, opts ...Option) *Backend {
	b := &Backend{n: n, run: filepath.Join(n.Root, "run"), hier: manifests.DefaultHierarchies}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Node returns the node the backend changes.
func (b *Backend) Node() nodestate.Node { return b.n }

func (b *Backend) layersDir() string              { return filepath.Join(b.n.StateDir(), "layers") }
func (b *Backend) layerDir(version string) string { return filepath.Join(b.layersDir(), version) }
func (b *Backend) newLayerDir(version string) string {
	return filepath.Join(b.layersDir(), ".new-"+version)
}
func (b *Backend) journalPath() string { return filepath.Join(b.layersDir(), "txn.json") }

// ImageDir is where the image's own tree stays reachable.
func (b *Backend) ImageDir() string { return filepath.Join(b.run, "strata", "image") }

// checkLayers refuses a layers directory that is not a plain directory
// (a symlink planted there would send writes and removals elsewhere).
func (b *Backend) checkLayers() error {
	fi, err := os.Lstat(b.layersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", b.n.Root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("node %s: %s is not a directory (%s): %w", b.n.Root, b.layersDir(), fi.Mode().Type(), nodestate.ErrDrift)
	}
	return nil
}

// managed returns the hierarchies the image has as directories.
func (b *Backend) managed() []string {
	base := b.n.Root
	if ms, err := mounts(); err == nil && isMountPoint(ms, b.ImageDir()) {
		base = b.ImageDir()
	}
	var out []string
	for _, h := range b.hier {
		if fi, err := os.Lstat(filepath.Join(base, h)); err == nil && fi.IsDir() {
			out = append(out, h)
		}
	}
	return out
}

// hierarchyOf returns the managed hierarchy p lies in, or "".
func hierarchyOf(hier []string, p string) string {
	for _, h := range hier {
		if manifests.Within(p, h) {
			return h
		}
	}
	return ""
}

// Check refuses an overlay that changes anything outside the managed
// hierarchies, or deletes a hierarchy itself.
func (b *Backend) Check(m *manifests.OverlayManifest) error {
	if r, err := b.refusal(); err != nil {
		return err
	} else if r != nil {
		return fmt.Errorf("applying %s: layer %s was refused at activation, so the node runs the layers below it, not its head: %w (strata restart --repair rewrites it from its overlay)", m.Version, r.Version, ErrLayerRefused)
	}
	hier := b.managed()
	for _, d := range m.Deletes {
		if h := hierarchyOf(hier, d); h == "" || d == h {
			return fmt.Errorf("overlay %s deletes /%s: %w (managed: /%s)", m.Version, d, ErrOutside, strings.Join(hier, ", /"))
		}
	}
	for _, e := range m.Entries {
		if h := hierarchyOf(hier, e.Path); h == "" || (e.Path == h && e.Type != manifests.TypeDir) {
			return fmt.Errorf("overlay %s writes /%s: %w (managed: /%s)", m.Version, e.Path, ErrOutside, strings.Join(hier, ", /"))
		}
	}
	return nil
}

// journal is the record of a switch in progress: which layer is added
// or dropped, and the ledger record whose write commits it.
type journal struct {
	Kind   string                `json:"kind"` // "apply", "rollback" or "repair"
	Record manifests.LedgerEntry `json:"record"`
}

func (b *Backend) readJournal() (*journal, error) {
	raw, err := safefile.Read(b.journalPath(), 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading layer journal: %w", err)
	}
	var j journal
	if err := manifests.Decode(raw, &j); err != nil {
		return nil, fmt.Errorf("reading layer journal %s: %w", b.journalPath(), err)
	}
	if _, err := manifests.ParseVersion(j.Record.Version); err != nil || (j.Kind != "apply" && j.Kind != "rollback" && j.Kind != "repair") {
		return nil, fmt.Errorf("layer journal %s names %s of %q: %w", b.journalPath(), j.Kind, j.Record.Version, manifests.ErrInvalid)
	}
	return &j, nil
}

// Interrupted describes a switch a crash left unfinished.
func (b *Backend) Interrupted() (string, error) {
	j, err := b.readJournal()
	if err != nil || j == nil {
		return "", err
	}
	return fmt.Sprintf("an interrupted %s of layer %s is pending (%s)", j.Kind, j.Record.Version, b.journalPath()), nil
}

// Recover settles a crash: a switch whose record is in ledger l is
// finished, any other is taken back; stacks in place are rebuilt from the
// ledger, and half-written layers are removed. An interrupted repair
// (RebuildLayer) leaves the layer's old or new directory in place, either
// a valid layer: the stacks are rebuilt on it before the other copy,
// which they may still use, is removed.
func (b *Backend) Recover(ctx context.Context, l *manifests.Ledger) (*manifests.LedgerEntry, error) {
	if err := b.checkLayers(); err != nil {
		return nil, err
	}
	j, err := b.readJournal()
	if err != nil {
		return nil, err
	}
	var undone *manifests.LedgerEntry
	if j != nil {
		last, r := l.Last(), j.Record
		committed := last.Seq == r.Seq && last.Action == r.Action && last.Version == r.Version && last.Digest == r.Digest
		switch {
		case j.Kind == "apply" && !committed:
			undone = &r
		case j.Kind == "rollback" && committed:
		}
	}
	if j != nil {
		// Only an interrupted switch leaves stacks that may differ
		// from the ledger.
		if _, err := b.restackLiveOrRefuse(ctx, l.Applied()); err != nil {
			return nil, err
		}
	}
	if err := b.prune(refs(l.Applied())); err != nil {
		return nil, err
	}
	if j != nil {
		if err := os.Remove(b.journalPath()); err != nil {
			return nil, fmt.Errorf("removing layer journal: %w", err)
		}
	}
	return undone, safefile.SyncFS(b.n.StateDir())
}

// prune removes every layer image and directory that is not one of
// keep.
func (b *Backend) prune(keep []layerRef) error {
	ents, err := os.ReadDir(b.layersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing layers: %w", err)
	}
	want := map[string]bool{"txn.json": true}
	for _, l := range keep {
		want[filepath.Base(b.path(l))] = true
	}
	for _, e := range ents {
		if !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(b.layersDir(), e.Name())); err != nil {
				return fmt.Errorf("removing layer %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// Stage writes ch's layer beside the others.
func (b *Backend) Stage(ctx context.Context, ch *nodestate.Change) (nodestate.Txn, error) {
	if err := b.Check(ch.Manifest); err != nil {
		return nil, err
	}
	v := ch.Manifest.Version
	if err := b.checkLayers(); err != nil {
		return nil, err
	}
	if err := safefile.MkdirAll(b.layersDir(), 0o700); err != nil {
		return nil, fmt.Errorf("writing layer %s: %w", v, err)
	}
	if err := b.removeLayer(v, true); err != nil {
		return nil, fmt.Errorf("writing layer %s: %w", v, err)
	}
	t := &txn{b: b, j: journal{Kind: "apply", Record: ch.Record}, unsigned: ch.Manifest.Layer == nil}
	li, k, err := writeLayerImage(ctx, b.newLayerFile(v), ch)
	if err != nil {
		return nil, err
	}
	if err := sameLayer(ch.Manifest, li); err != nil {
		k.close()
		return nil, errors.Join(err, os.Remove(b.newLayerFile(v)))
	}
	t.j.Record.Layer = li
	if err := safefile.SyncDir(b.layersDir()); err != nil {
		k.close()
		_ = os.Remove(b.newLayerFile(v))
		return nil, err
	}
	b.keep(v, k)
	if testHookStaged != nil {
		testHookStaged(b, v)
	}
	fault.Point("layer-written")
	return t, nil
}

// StageRevert prepares dropping the top layer, ch.Manifest's.
func (b *Backend) StageRevert(ctx context.Context, ch *nodestate.Change) (nodestate.Txn, error) {
	if err := b.CheckRevert(ctx, ch); err != nil {
		return nil, err
	}
	return &txn{b: b, j: journal{Kind: "rollback", Record: ch.Record}}, nil
}

// CheckRevert checks, changing nothing, that ch.Manifest's layer is there
// to be dropped (the layers below it are the tree it returns to).
func (b *Backend) CheckRevert(ctx context.Context, ch *nodestate.Change) error {
	if !b.hasLayer(ch.Manifest.Version) {
		return fmt.Errorf("rolling back %s: its layer (%s or %s) is missing: %w", ch.Manifest.Version, b.layerFile(ch.Manifest.Version), b.layerDir(ch.Manifest.Version), nodestate.ErrDrift)
	}
	return nil
}

// hasLayer reports whether version's layer is there, as an image or as
// a directory.
func (b *Backend) hasLayer(v string) bool {
	if fi, err := os.Lstat(b.layerFile(v)); err == nil && fi.Mode().IsRegular() {
		return true
	}
	fi, err := os.Lstat(b.layerDir(v))
	return err == nil && fi.IsDir()
}

// removeLayer removes version's layer in every form, and with staged its
// staged new image too.
func (b *Backend) removeLayer(v string, staged bool) error {
	var errs []error
	paths := []string{b.layerFile(v), b.layerDir(v), b.newLayerDir(v)}
	if staged {
		paths = append(paths, b.newLayerFile(v))
	}
	for _, p := range paths {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// txn is one switch of the layer list.
type txn struct {
	b        *Backend
	j        journal
	switched bool
	// unsigned: the applied overlay's signed manifest records no layer
	// image (schema.LayerIntegrity.Unsigned).
	unsigned bool
}

// layersWith returns the versions in effect after the switch (with) or
// before it (without).
func (t *txn) layers(with bool) ([]layerRef, error) {
	l, err := t.b.n.ReadLedger()
	if err != nil {
		return nil, err
	}
	cur := refs(l.Applied())
	v := t.j.Record.Version
	switch {
	case t.j.Kind == "apply" && with:
		return append(cur, layerRef{Version: v, Image: t.j.Record.Layer}), nil
	case t.j.Kind == "rollback" && with:
		if n := len(cur); n > 0 && cur[n-1].Version == v {
			return cur[:n-1], nil
		}
		return nil, fmt.Errorf("rolling back %s: it is not the top layer: %w", v, nodestate.ErrDrift)
	}
	return cur, nil
}

// Switch records the journal and makes the new layer list the one in
// effect: renamed into place, and the stacks in place rebuilt.
func (t *txn) Switch(ctx context.Context) error {
	b, v := t.b, t.j.Record.Version
	raw, err := manifests.Encode(t.j)
	if err != nil {
		return err
	}
	if err := safefile.WriteAtomic(b.journalPath(), raw, 0o600); err != nil {
		b.forget(v)
		return err
	}
	if t.j.Kind == "apply" {
		if err := b.renameKept(v, b.newLayerFile(v), b.layerFile(v)); err != nil {
			return errors.Join(fmt.Errorf("adding layer %s: %w", v, err), t.Abort(ctx))
		}
		if err := safefile.SyncDir(b.layersDir()); err != nil {
			return errors.Join(err, t.Abort(ctx))
		}
	}
	t.switched = true
	layers, err := t.layers(true)
	if err == nil {
		err = b.restackLive(ctx, layers)
	}
	if err == nil {
		// An applied layer no signature covers is named; a dropped one
		// no longer.
		err = b.markUnsigned(v, t.j.Kind == "apply" && t.unsigned)
	}
	if err != nil {
		return errors.Join(err, t.Abort(ctx))
	}
	fault.Point("switched")
	return nil
}

// Commit appends the record to the ledger; a rollback's layer then goes.
func (t *txn) Commit(ctx context.Context, l *manifests.Ledger) (*manifests.Ledger, error) {
	t.b.forget(t.j.Record.Version)
	fault.Point("before-ledger")
	next, err := t.b.n.Commit(l, t.j.Record)
	if err != nil {
		return nil, err
	}
	fault.Point("after-ledger")
	if t.j.Kind == "rollback" {
		if err := t.b.removeLayer(t.j.Record.Version, false); err != nil {
			return next, fmt.Errorf("removing layer %s: %w", t.j.Record.Version, err)
		}
	}
	if err := os.Remove(t.b.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return next, fmt.Errorf("removing layer journal: %w", err)
	}
	return next, nil
}

// Abort puts the stacks back as the ledger has them and removes a new
// layer.
func (t *txn) Abort(ctx context.Context) error {
	b, v := t.b, t.j.Record.Version
	b.forget(v)
	if held, err := b.n.Holds(t.j.Record); err != nil || held {
		if err == nil {
			err = nodestate.ErrCommitted
		}
		return fmt.Errorf("taking back layer %s: %w", v, err)
	}
	var errs []error
	if t.switched {
		layers, err := t.layers(false)
		if err == nil {
			err = b.restackLive(ctx, layers)
		}
		if err == nil && t.j.Kind == "apply" {
			err = b.markUnsigned(v, false)
		}
		if err != nil {
			// The stacks may still hold the layer: keep it and the
			// journal, so the next run's recovery switches back.
			return fmt.Errorf("taking back layer %s: switching back: %w", v, err)
		}
	}
	if t.j.Kind == "apply" {
		errs = append(errs, b.removeLayer(v, true))
	}
	if err := os.Remove(b.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("taking back layer %s: %w", v, err)
	}
	return nil
}
