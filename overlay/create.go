package overlay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Change is what an overlay should do to the head of its line.
type Change struct {
	// Tree is a host directory laid over the head: every entry in it that
	// differs from the head (content, type, mode or owner, all taken as
	// they are on disk) becomes part of the overlay. Directories the head
	// already has keep the head's owner and mode.
	Tree string
	// Adds place single host files or directories at image paths. A path
	// the head has keeps its mode and owner; a new one gets root:root and
	// 0644 or 0755.
	Adds []Add
	// Deletes are absolute image paths to remove.
	Deletes []string
	// Restart and Reload force actions on units beyond the inferred plan.
	// Each must be a unit of the line's catalog (after the change), or an
	// instance of a template unit there, unless AllowUnknownUnits.
	Restart []string
	Reload  []string
	// AllowUnknownUnits lets Restart and Reload name units the catalog
	// does not have (units that come from outside the image).
	AllowUnknownUnits bool
	// Exact are entries put in place as they are (type, mode, owner,
	// link target), files with the content of Src: what a revert puts
	// back. Directories the head has take the mode and owner given here.
	Exact []ExactEntry
}

// ExactEntry is one entry of Change.Exact.
type ExactEntry struct {
	Entry manifests.Entry
	// Src is the host file holding a file entry's content.
	Src string
}

// Add is one --add DEST=SRC.
type Add struct {
	Dest string
	Src  string
	// Mode, when SetMode, is the mode of the files it adds (not of
	// directories); otherwise a path the head has keeps its mode and a
	// new one gets 0644 (0755 if executable).
	SetMode bool
	Mode    manifests.Mode
	// UID and GID, when SetOwner, own every entry it adds; otherwise a
	// path the head has keeps its owner and a new one is root's.
	SetOwner bool
	UID, GID int
	// User and Group, when set (with SetOwner), name the owner instead of
	// UID and GID: Create resolves them with the /etc/passwd and
	// /etc/group of the line's head.
	User, Group string
}

// override applies the mode and owner a asks for to e.
func (a Add) override(e manifests.Entry) manifests.Entry {
	if a.SetMode && e.Type == manifests.TypeFile {
		e.Mode = a.Mode
	}
	if a.SetOwner {
		e.UID, e.GID = a.UID, a.GID
	}
	return e
}

// CreateOptions are the settings of Create.
type CreateOptions struct {
	// Version is the new overlay's strict semver version.
	Version string
	// Line picks the line (optional when the repository has one).
	Line string
	// Compression is zstd (default), xz, gzip or none.
	Compression string
	// RequiresImage is the image constraint; default "^<image version>".
	RequiresImage string
	// Created is the manifest timestamp; default now.
	Created time.Time
	// Parent, when set, is the head version the change was made against:
	// Create refuses (ErrHeadMoved) when the line's head is another one,
	// so an edit never silently drops what was published meanwhile.
	Parent string
	// SkipValidation, when set, is why the validation commands of the
	// services the change restarts or reloads are not run before it is
	// signed; the overlay's signed manifest records it. Nodes validate
	// all the same.
	SkipValidation string
	// reverts is the overlay a revert undoes (Revert sets it).
	reverts *manifests.Ref
	// Progress, when set, is told of long steps (staging the line's tree
	// to validate the change).
	Progress func(string)
}

// Created describes a new overlay.
type Created struct {
	Path     string
	Manifest *manifests.OverlayManifest
	Digest   string
	// Validation is what the services' validation commands said of it.
	Validation *Validation
}

// Create computes change against the head of the repository's line, signs
// the result with key, writes it under REPO/overlays/ and appends it to the
// signed index. Nothing is written unless every check passes.
func Create(ctx context.Context, repoDir string, key *sign.Key, ch Change, o CreateOptions) (*Created, error) {
	algo, err := compress.Parse(o.Compression)
	if err != nil {
		return nil, err
	}
	if _, err := manifests.ParseVersion(o.Version); err != nil {
		return nil, err
	}
	r, c, unlock, err := openHead(ctx, repoDir, o.Line, "creating overlay")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkSigner(c, key); err != nil {
		return nil, err
	}
	m, open, next, err := prepare(ctx, c, ch, o)
	if err != nil {
		return nil, err
	}
	// The manifest's own checks first: they cost nothing, validation
	// stages the line's tree.
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	v, err := validateChange(ctx, c, m, open, o)
	if err != nil {
		return nil, err
	}
	// The layer image is written while the patches are made: it holds
	// the full contents, whatever ships as a patch.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	layerc := make(chan error, 1)
	lm := *m
	go func() {
		li, err := layerRecord(lctx, &lm, next, cancellable(lctx, open))
		lm.Layer = li
		layerc <- err
	}()
	patches, err := makePatches(ctx, c, m.Entries, open)
	if err != nil {
		cancel()
	}
	if lerr := <-layerc; err == nil && lerr != nil {
		err = lerr
	}
	if err != nil {
		return nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	m.Layer = lm.Layer
	m.Patches = patches.list
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	created, err := publish(ctx, r, c, m, cancellable(ctx, open), cancellable(ctx, patches.opener(open)), algo, key, key, next)
	if err != nil {
		return nil, err
	}
	created.Validation = v
	return created, nil
}

// prepare computes change against chain c at its head: the manifest
// (entries, deletes, restart plan, catalog, tree digest) but not its
// patches; open gives the new files' contents, next is the tree after.
func prepare(ctx context.Context, c *Chain, ch Change, o CreateOptions) (*manifests.OverlayManifest, tree.Opener, tree.State, error) {
	head := c.Head()
	if o.Parent != "" && o.Parent != head.Version {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: the change was made against %s, and line %s's head is now %s: %w", o.Version, o.Parent, c.Line.Name, head.Version, ErrHeadMoved)
	}
	if err := manifests.CheckGreater(o.Version, head.Version); err != nil {
		return nil, nil, nil, fmt.Errorf("creating overlay for line %s (head %s): %w", c.Line.Name, head.Version, err)
	}
	if o.SkipValidation != "" {
		if err := manifests.ValidReason("--skip-validation", o.SkipValidation); err != nil {
			return nil, nil, nil, err
		}
	}
	ch.Adds = slices.Clone(ch.Adds)
	if err := resolveOwners(ctx, c, ch.Adds); err != nil {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	d, err := diff(c.State, ch)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(d.entries) == 0 && len(d.deletes) == 0 {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: %w: nothing differs from head %s", o.Version, ErrEmpty, head.Version)
	}
	if err := checkHierarchies(c.Image.Manifest.Managed(), d.entries, d.deletes); err != nil {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	next, err := c.State.Apply(d.entries, d.deletes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	m := &manifests.OverlayManifest{
		Schema:   manifests.Schema,
		Kind:     manifests.KindOverlay,
		Line:     c.Line.Name,
		Version:  o.Version,
		Parent:   head,
		Lineage:  manifests.WindowLineage(c.Lineage()),
		Requires: manifests.Requires{Image: o.RequiresImage},
		Entries:  d.entries,
		Deletes:  d.deletes,

		ValidationSkipped: o.SkipValidation,
		Reverts:           o.reverts,
	}
	if m.Requires.Image == "" {
		m.Requires.Image = "^" + c.Image.Manifest.Version
	}
	if ok, err := manifests.Satisfies(c.Image.Manifest.Version, m.Requires.Image); err != nil {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	} else if !ok {
		return nil, nil, nil, fmt.Errorf("creating overlay %s: --requires-image %s excludes the line's own image %s: %w", o.Version, m.Requires.Image, c.Image.Manifest.Version, ErrConstraint)
	}
	created := o.Created
	if created.IsZero() {
		created = time.Now()
	}
	m.Created = created.UTC().Truncate(time.Second).Format(time.RFC3339)
	m.TreeDigest = next.Digest()
	open := func(e manifests.Entry) (io.ReadCloser, error) {
		if host, ok := d.src[e.Path]; ok {
			return os.Open(host)
		}
		b, err := chainContent(ctx, c, e)
		return io.NopCloser(bytes.NewReader(b)), err
	}
	if err := planServices(m, c, next, open, ch); err != nil {
		return nil, nil, nil, err
	}
	return m, open, next, nil
}

// PathChange is one path an overlay changes, against the head.
type PathChange struct {
	Path string `json:"path"`
	// Kind is "added", "modified" or "deleted".
	Kind string `json:"kind"`
	// What names a modification: content, mode, owner, type, target
	// (manifests.EntryChanges).
	What []string `json:"what,omitempty"`
}

// Changes lists what manifest m (of an overlay on the tree head)
// changes, path by path, sorted: additions and modifications with what
// differs, deletions.
func Changes(head tree.State, m *manifests.OverlayManifest) []PathChange {
	out := []PathChange{}
	for _, e := range m.Entries {
		old, had := head[e.Path]
		switch {
		case !had:
			out = append(out, PathChange{Path: "/" + e.Path, Kind: "added"})
		default:
			out = append(out, PathChange{Path: "/" + e.Path, Kind: "modified", What: manifests.EntryChanges(old, e)})
		}
	}
	for _, d := range m.Deletes {
		out = append(out, PathChange{Path: "/" + d, Kind: "deleted"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Previewed is what Preview found: the overlay Create would publish, its
// changes against the head, and its validation.
type Previewed struct {
	Manifest   *manifests.OverlayManifest
	Changes    []PathChange
	Validation *Validation
}

// Preview computes the overlay Create would publish for change at the
// head of the repository's line, without a key and without writing
// anything: its entries, deletes, restart plan and catalog (patches are
// left out), its changes path by path, and its validation: the
// validation commands run as Create runs them, and a refusal is Create's
// (ErrValidation). Publishing the same change with CreateOptions.Parent
// set to the head it previewed gives the same plan, or nothing.
func Preview(ctx context.Context, repoDir string, ch Change, o CreateOptions) (*Previewed, error) {
	r, err := repo.Open(ctx, repoDir, nil)
	if err != nil {
		return nil, err
	}
	c, err := repo.LoadHead(ctx, r, o.Line)
	if err != nil {
		return nil, err
	}
	return previewOn(ctx, c, ch, o)
}

func previewOn(ctx context.Context, c *Chain, ch Change, o CreateOptions) (*Previewed, error) {
	if o.Parent == "" {
		o.Parent = c.Head().Version
	}
	if o.Version == "" {
		v, err := manifests.ParseVersion(c.Head().Version)
		if err != nil {
			return nil, err
		}
		o.Version = v.IncPatch().String()
	}
	m, open, _, err := prepare(ctx, c, ch, o)
	if err != nil {
		return nil, err
	}
	// The checks Create makes before signing, so a dry run approves
	// nothing Create would refuse (strata's own paths, key files, a
	// change its services refuse).
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("creating overlay %s: %w", o.Version, err)
	}
	v, err := validateChange(ctx, c, m, open, o)
	if err != nil {
		return nil, err
	}
	return &Previewed{Manifest: m, Changes: Changes(c.State, m), Validation: v}, nil
}

// publish records m's layer image unless m has its record already
// (writing it from the full contents content gives, over next, the tree
// after m), signs m with key, writes
// the overlay with the payload open gives under r's overlays/, and
// appends it to the index, which indexKey signs.
func publish(ctx context.Context, r *repo.Repo, c *Chain, m *manifests.OverlayManifest, content, open tree.Opener, algo compress.Algorithm, key, indexKey *sign.Key, next tree.State) (*Created, error) {
	head := c.Head()
	if m.Layer == nil {
		li, err := layerRecord(ctx, m, next, content)
		if err != nil {
			return nil, fmt.Errorf("creating overlay %s: %w", m.Version, err)
		}
		m.Layer = li
	}
	keys, err := c.Keys.After(m)
	if err != nil {
		return nil, err
	}
	cat := c.Catalog
	if m.Catalog != nil {
		cat = *m.Catalog
	}
	raw, err := manifests.Encode(m)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%s.overlay.tar%s", m.Line, m.Version, algo.Ext())
	rel := path.Join("overlays", name)
	out := r.Path(rel)
	p, ok := r.Store.(repo.Putter)
	if !ok {
		return nil, fmt.Errorf("creating overlay %s: %w", out, repo.ErrReadOnly)
	}
	// The version is newer than the head, so nothing the index names is
	// here; something that is (left by hand, or a link) is not written
	// over.
	if there, err := repo.Exists(ctx, r.Store, rel); err != nil || there {
		if err == nil {
			err = fmt.Errorf("%s exists already and the index does not name it: %w", rel, repo.ErrExists)
		}
		return nil, fmt.Errorf("creating overlay %s: %w", out, err)
	}
	sig := key.Sign(raw, sign.OverlayComment(m.Line, m.Version))
	// Hashed as it is written: the archive is not read back.
	sum, size, err := repo.PutWritten(ctx, p, rel, func(w io.Writer) error {
		return writeArchive(w, raw, sig, m, open, algo)
	})
	if err != nil {
		return nil, fmt.Errorf("writing overlay %s: %w", out, err)
	}
	digest := manifests.Digest(raw)
	c.Line.Overlays = append(c.Line.Overlays, manifests.OverlayRef{Version: m.Version, File: rel, Digest: digest, SHA256: sum, Size: size, Parent: head})
	st := &manifests.HeadState{
		Schema: manifests.Schema, Kind: manifests.KindState, Line: c.Line.Name,
		Head:       manifests.Ref{Version: m.Version, Digest: digest},
		Image:      manifests.Ref{Version: c.Line.Image.Version, Digest: c.Line.Image.Digest},
		TreeDigest: m.TreeDigest, Keys: keys.Strings(), Catalog: cat, Files: next.Entries(),
	}
	if err := r.SaveWithState(ctx, c.Line, st, indexKey); err != nil {
		// Taken back unless the index got as far as naming it (a save
		// can fail after the index is in place, syncing its directory).
		wctx := context.WithoutCancel(ctx) // also when ctx ended it
		if idx, rerr := repo.ReadMember(wctx, r.Store, repo.IndexFile, manifests.MaxIndexSize); rerr != nil || !bytes.Contains(idx, []byte(strconv.Quote(rel))) {
			_ = p.Remove(wctx, rel)
		}
		return nil, err
	}
	return &Created{Path: out, Manifest: m, Digest: digest}, nil
}

// openHead locks the repository in repoDir for a publisher (one writer
// at a time: a second waits for the first), opens it and loads line at
// its head, refusing an index signed by a key the line no longer trusts;
// what names the operation in that error. unlock releases the lock.
func openHead(ctx context.Context, repoDir, line, what string) (*repo.Repo, *Chain, func(), error) {
	unlock, err := repo.Lock(ctx, repoDir)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := repo.Open(ctx, repoDir, nil)
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	c, err := repo.LoadHead(ctx, r, line)
	if err == nil {
		if err = c.CheckIndexKey(); err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
	}
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return r, c, unlock, nil
}

// checkSigner refuses a key the line does not trust at its head: one its
// image does not list and no key rotation added, or one a rotation
// revoked.
func checkSigner(c *Chain, key *sign.Key) error {
	if c.Keys.HasKey(key) {
		return nil
	}
	return fmt.Errorf("signing for line %s: key %s is not one the line trusts at %s (trusted: %s): %w", c.Line.Name, key.ID(), c.Head().Version, strings.Join(c.Keys.IDs(), ", "), sign.ErrBadSignature)
}

// planServices fills in the restart plan and, when unit files or declared
// paths changed, the new catalog.
func planServices(m *manifests.OverlayManifest, c *Chain, next tree.State, open tree.Opener, ch Change) error {
	changed := catalog.ChangedPaths(m, c.State)
	actions, unclaimed := catalog.Plan(c.Catalog, changed)
	if catalog.TouchesUnits(changed) {
		cat, err := catalog.Build(tree.NewFS(next, open), declaredOf(c.Catalog, next))
		if err != nil {
			return fmt.Errorf("creating overlay %s: service catalog: %w", m.Version, err)
		}
		catalog.CarryCommands(&cat, c.Catalog)
		m.Catalog = &cat
		more, _ := catalog.Plan(cat, changed)
		actions = catalog.MergeActions(actions, more)
		unclaimed = catalog.StillUnclaimed(unclaimed, more)
	}
	cat := c.Catalog
	if m.Catalog != nil {
		cat = *m.Catalog
	}
	for _, flag := range []struct {
		name  string
		units []string
	}{{"--restart", ch.Restart}, {"--reload", ch.Reload}} {
		if err := catalog.CheckUnits(cat, flag.units, flag.name, ch.AllowUnknownUnits); err != nil {
			return fmt.Errorf("creating overlay %s: %w", m.Version, err)
		}
	}
	for _, u := range ch.Restart {
		actions = catalog.MergeActions(actions, []manifests.ServiceAction{{Unit: u, Action: manifests.ActionRestart, Because: []string{"--restart"}}})
	}
	for _, u := range ch.Reload {
		actions = catalog.MergeActions(actions, []manifests.ServiceAction{{Unit: u, Action: manifests.ActionReload, Because: []string{"--reload"}}})
	}
	m.Services = catalog.Settle(actions, c.State, next)
	m.Unclaimed = catalog.StillUnclaimed(unclaimed, m.Services)
	if m.Services == nil {
		m.Services = []manifests.ServiceAction{}
	}
	if m.Unclaimed == nil {
		m.Unclaimed = []string{}
	}
	return nil
}

// declaredOf carries the declared paths of a catalog over to a rebuilt
// one, for units that still exist.
func declaredOf(cat manifests.Catalog, next tree.State) []catalog.Declared {
	var out []catalog.Declared
	for _, s := range cat.Services {
		exists := false
		for _, f := range s.UnitFiles {
			if _, ok := next[f]; ok {
				exists = true
			}
		}
		if !exists {
			continue
		}
		for _, p := range s.Paths {
			out = append(out, catalog.Declared{Unit: s.Unit, Path: p})
		}
		for _, p := range s.ReloadPaths {
			out = append(out, catalog.Declared{Unit: s.Unit, Path: p, Reload: true})
		}
	}
	return out
}

// checkHierarchies refuses a change outside the line's managed
// hierarchies (a node that boots the image can only layer those), or one
// that deletes a hierarchy itself.
func checkHierarchies(hs []string, entries []manifests.Entry, deletes []string) error {
	for _, d := range deletes {
		if !manifests.InHierarchies(hs, d) || slices.Contains(hs, d) {
			return fmt.Errorf("deleting /%s: %w (the line's are /%s)", d, ErrOutsideHierarchies, strings.Join(hs, ", /"))
		}
	}
	for _, e := range entries {
		if !manifests.InHierarchies(hs, e.Path) {
			return fmt.Errorf("writing /%s: %w (the line's are /%s)", e.Path, ErrOutsideHierarchies, strings.Join(hs, ", /"))
		}
	}
	return nil
}
