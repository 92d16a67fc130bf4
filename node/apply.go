package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// Source says which overlays to apply: Files, oldest first, or every
// overlay of Repo after the node's head up to Through (empty: the head).
type Source struct {
	// Files are overlay files, applied oldest first (by the versions
	// their manifests claim, whatever order they are given in).
	Files []string
	// Repo is a repository (a directory or a URL): the overlays of the
	// node's line after its head.
	Repo string
	// Store, when set, is Repo's store, opened by the caller (the agent
	// keeps one across polls, with the index it just fetched).
	Store repo.Store
	// Through stops a repository apply after this version.
	Through string
	// Channel picks how far a repository (or bundle) apply without
	// Through goes: ChannelStable (the default, "") stops at the line's
	// newest release, leaving the prereleases after it (2.0.0-rc.1)
	// for the nodes that ask for them; ChannelCandidate takes those too.
	Channel string
}

// The channels of Source.Channel.
const (
	ChannelStable    = "stable"
	ChannelCandidate = "candidate"
)

// ErrChannel reports a channel strata does not know.
var ErrChannel = errors.New("unknown channel (stable or candidate)")

// CheckChannel refuses a channel other than stable, candidate or "".
func CheckChannel(ch string) error {
	switch ch {
	case "", ChannelStable, ChannelCandidate:
		return nil
	}
	return fmt.Errorf("%w: %q", ErrChannel, ch)
}

// ApplyOptions are the settings of one Apply.
type ApplyOptions struct {
	// DryRun computes and returns the plan and changes nothing.
	DryRun bool
	// Force replaces and deletes files changed on the node since its head
	// (ErrLocalEdit otherwise); each overlay's ledger record names the
	// paths it overwrote.
	Force bool
}

// Plan is what applying one overlay does.
type Plan struct {
	Version string `json:"version"`
	Parent  string `json:"parent"`
	// AlreadyApplied marks an overlay the node has; it is skipped.
	AlreadyApplied bool                      `json:"already_applied,omitempty"`
	Writes         []string                  `json:"writes"`
	Deletes        []string                  `json:"deletes"`
	Actions        []manifests.ServiceAction `json:"actions"`
	Unclaimed      []string                  `json:"unclaimed"`
	// Restarted lists the actions carried out (empty on dry runs and with
	// no restarter).
	Restarted []manifests.ServiceAction `json:"restarted,omitempty"`
	// Validated lists the units whose validation command passed.
	Validated []string `json:"validated,omitempty"`
	// Overwrote are the paths changed on the node that it replaced or
	// deleted (ApplyOptions.Force).
	Overwrote []string `json:"overwrote,omitempty"`
	// Live is the plan as resolved against the running service manager
	// (the systemd restarter): what is restarted, reloaded, re-executed,
	// deferred to a reboot or skipped, and why.
	Live *systemd.Resolved `json:"live,omitempty"`
}

// ApplyReport describes an apply run.
type ApplyReport struct {
	Root   string        `json:"root"`
	DryRun bool          `json:"dry_run"`
	From   manifests.Ref `json:"from"`
	To     manifests.Ref `json:"to"`
	Plans  []Plan        `json:"plans"`
	// HeldBack are the prereleases after the line's newest release that
	// the stable channel left for the candidate channel.
	HeldBack []string                  `json:"held_back,omitempty"`
	Pending  []manifests.ServiceAction `json:"pending_restarts"`
}

// Apply verifies every overlay of src against the node and then applies
// them in order, restarting what each touched through the node's
// Restarter. See the package documentation for the guarantees.
func (h *Node) Apply(ctx context.Context, src Source, o ApplyOptions) (rep *ApplyReport, err error) {
	progress, b, root := h.o.Progress, h.b, h.root
	n := b.Node()
	unlock, err := n.Lock(ctx, h.o.LockWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if o.DryRun {
		if err := refuseInterrupted(b, root); err != nil {
			return nil, err
		}
	} else if err := recoverTxn(ctx, b, progress); err != nil {
		return nil, err
	} else if err := refuseStaged(n, "applying overlays"); err != nil {
		return nil, err
	}
	if err := refuseHeld(n, "applying overlays"); err != nil {
		return nil, err
	}
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	trust, err := n.TrustedKeys()
	if err != nil {
		return nil, err
	}
	var st repo.Store
	if src.Repo != "" {
		var done func()
		if st, done, err = repo.LocateForRereads(src.Repo, src.Store); err != nil {
			return nil, err
		}
		defer done()
	}
	archives, serial, err := gather(ctx, v, src, st, trust, h.o.Progress)
	if err != nil {
		return nil, err
	}
	archives, heldBack := holdPrereleases(archives, src)
	rep = &ApplyReport{Root: root, DryRun: o.DryRun, From: v.Head(), To: v.Head(), HeldBack: heldBack}
	if !o.DryRun && serial > 0 {
		// The index is authentic and current: once the apply has
		// succeeded, or committed an overlay before a later step failed,
		// the node refuses any older one. A refused apply leaves the
		// node's freshness state as it was, like everything else.
		defer func() {
			if err == nil || rep != nil && rep.To != rep.From {
				err = errors.Join(err, n.RecordIndexSerial(serial))
			}
		}()
	}
	todo, states, err := checkSequence(v, archives, rep)
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		if err := overwrites(ctx, b, root, states, todo, rep, o.Force, progress); err != nil {
			return rep, err
		}
		rep.Pending = v.Ledger.PendingRestarts()
		return rep, resolveDry(ctx, h.o.Restarter, v, todo, states, rep)
	}
	// Staging verifies each payload just before its overlay commits; the
	// payloads of the later overlays of a batch are verified now, so a bad
	// one stops the batch before the node changes at all: every member,
	// and every patched file rebuilt from the base it will have (the
	// node's file, which must not have drifted, or what an earlier
	// overlay of the batch writes). They are read twice, on purpose: this
	// pass costs about 1% of applying them (BenchmarkPayloadVerify against
	// BenchmarkApplyBatch), less than writing them to a spool and reading
	// that back would, and staging re-checks every member anyway. A store
	// for which a second read is dear (HTTP, OCI) should cache members,
	// not this loop.
	for _, a := range todo {
		if err := b.Check(a.Manifest); err != nil {
			return rep, err
		}
	}
	if err := overwrites(ctx, b, root, states, todo, rep, o.Force, progress); err != nil {
		return rep, err
	}
	for k := 1; k < len(todo); k++ {
		a := todo[k]
		progress(fmt.Sprintf("verifying %s %s", a.Manifest.Line, a.Manifest.Version))
		bases := batchBases(n, todo, k, states)
		if err := a.Payload(ctx, bases, func(manifests.Entry, io.Reader) error { return nil }); err != nil {
			return rep, err
		}
	}
	for _, a := range todo {
		plan := &rep.Plans[indexOf(rep.Plans, a.Manifest.Version)]
		progress(fmt.Sprintf("applying %s %s (%d writes, %d deletes)", a.Manifest.Line, a.Manifest.Version, len(plan.Writes), len(plan.Deletes)))
		if err := h.applyOne(ctx, v, a, states[a.Manifest.Version], plan); err != nil {
			// An overlay can commit and a step after it fail: the
			// report says where the node is.
			if cur, lerr := view.Load(n); lerr == nil {
				rep.To = cur.Head()
			}
			return rep, err
		}
		rep.To = manifests.Ref{Version: a.Manifest.Version, Digest: a.Digest}
		if h.o.Restarter == nil {
			progress(fmt.Sprintf("restarts of %s left pending: %s", a.Manifest.Version, describe(plan.Actions)))
		}
		if v, err = view.Load(n); err != nil {
			return rep, err
		}
	}
	// v is the node as the last overlay left it.
	rep.Pending = v.Ledger.PendingRestarts()
	return rep, nil
}

func indexOf(plans []Plan, version string) int {
	for i, p := range plans {
		if p.Version == version {
			return i
		}
	}
	return -1
}

func describe(as []manifests.ServiceAction) string {
	if len(as) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range as {
		parts = append(parts, string(a.Action)+" "+a.Unit)
	}
	return strings.Join(parts, ", ")
}

// gather opens the overlays src names, verifying signatures against the
// node's keys as the key rotations after the node's head change them
// (and, for a repository, file digests against its index, which must be
// fresh: not older than one the node accepted, not expired). It returns
// the index serial (0 for files).
func gather(ctx context.Context, v *view.View, src Source, st repo.Store, trust *sign.KeySet, progress func(string)) ([]*archive.Archive, uint64, error) {
	head := v.Head()
	if src.Repo == "" {
		files, err := oldestFirst(ctx, src.Files, progress)
		if err != nil {
			return nil, 0, err
		}
		var out []*archive.Archive
		for _, f := range files {
			a, err := archive.OpenContext(ctx, f, trust)
			if err != nil {
				return nil, 0, err
			}
			// A rotation the node has applied already is in its
			// keys; taking it again could bring back a key a later
			// one revoked.
			if manifests.CompareVersions(a.Manifest.Version, head.Version) > 0 {
				if trust, err = trust.After(a.Manifest); err != nil {
					return nil, 0, err
				}
			}
			out = append(out, a)
		}
		return out, 0, nil
	}
	r, err := repo.OpenAt(ctx, st, trust, repo.Position{Line: v.Ledger.Entries[0].Line, Head: head})
	if err != nil {
		return nil, 0, err
	}
	accepted, err := v.N.IndexSerial()
	if err != nil {
		return nil, 0, err
	}
	if err := r.Index.CheckFresh(time.Now(), accepted); err != nil {
		return nil, 0, fmt.Errorf("repository %s: %w", src.Repo, err)
	}
	l, err := r.Index.Find(v.Ledger.Entries[0].Line)
	if err != nil {
		return nil, 0, err
	}
	start, err := r.Find(ctx, l, head)
	if err != nil {
		return nil, 0, err
	}
	if start < 0 {
		return nil, 0, fmt.Errorf("node head %s (%s) is not in line %s of %s: %w", head.Version, head.Digest, l.Name, src.Repo, ErrSequence)
	}
	if src.Through != "" && !l.HasVersion(src.Through) {
		// Through may be older than the inline overlays: then nothing
		// after the node's head is wanted, or the line lacks it.
		if err := r.Expand(ctx, l); err != nil {
			return nil, 0, err
		}
		if start, err = r.Find(ctx, l, head); err != nil {
			return nil, 0, err
		}
		if !l.HasVersion(src.Through) {
			return nil, 0, fmt.Errorf("line %s has no version %s: %w", l.Name, src.Through, ErrSequence)
		}
	}
	var out []*archive.Archive
	want := l.Overlays[start:]
	// Over HTTP or OCI the overlays are fetched ahead, a few at once,
	// while the first ones are checked.
	if p, ok := st.(repo.Prefetcher); ok {
		var ahead []repo.Sized
		for _, ref := range want {
			if src.Through != "" && manifests.CompareVersions(ref.Version, src.Through) > 0 {
				break
			}
			ahead = append(ahead, repo.Sized{Name: ref.File, Size: ref.Size})
		}
		p.Prefetch(ctx, ahead)
	}
	for k, ref := range want {
		if src.Through != "" && manifests.CompareVersions(ref.Version, src.Through) > 0 {
			break
		}
		a, err := repo.OpenIndexed(ctx, r, ref, trust)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, missingOverlays(ctx, r, src, want[k:], err)
		}
		if err != nil {
			return nil, 0, err
		}
		if trust, err = trust.After(a.Manifest); err != nil {
			return nil, 0, err
		}
		out = append(out, a)
	}
	// At the line's head the keys are what the index signer must be
	// trusted by: one a rotation revoked signs nothing for this node,
	// even if the keys it had before verified it.
	if src.Through == "" || src.Through == l.Head().Version {
		if !trust.Has(r.KeyID) {
			return nil, 0, fmt.Errorf("repository %s: the index is signed by key %s, which line %s no longer trusts at its head %s (trusted: %s): %w", src.Repo, r.KeyID, l.Name, l.Head().Version, strings.Join(trust.IDs(), ", "), sign.ErrBadSignature)
		}
	}
	return out, r.Index.Serial, nil
}

// holdPrereleases cuts a repository apply without Through on the stable
// channel after the newest release among archives: the prereleases after
// it wait for the candidate channel (or an explicit Through). Prereleases
// before a release are part of the way to it and stay.
func holdPrereleases(archives []*archive.Archive, src Source) ([]*archive.Archive, []string) {
	if src.Repo == "" || src.Through != "" || src.Channel == ChannelCandidate {
		return archives, nil
	}
	keep := len(archives)
	for keep > 0 && isPrerelease(archives[keep-1].Manifest.Version) {
		keep--
	}
	var held []string
	for _, a := range archives[keep:] {
		held = append(held, a.Manifest.Version)
	}
	return archives[:keep], held
}

// isPrerelease reports whether v has a prerelease part (2.0.0-rc.1).
func isPrerelease(v string) bool {
	sv, err := manifests.ParseVersion(v)
	return err == nil && sv.Prerelease() != ""
}

// checkSequence checks the overlays continue the node's head one after the
// other, fills in their plans and returns those not yet applied, with the
// expected trees before and after each (by version).
func checkSequence(v *view.View, archives []*archive.Archive, rep *ApplyReport) ([]*archive.Archive, map[string][2]tree.State, error) {
	applied := map[string]string{}
	for _, e := range v.Applied {
		applied[e.Version] = e.Digest
	}
	cur := v.Head()
	known := []manifests.Ref{v.Ledger.Canonical().Head}
	for _, e := range v.Applied {
		known = append(known, manifests.Ref{Version: e.Version, Digest: e.Digest})
	}
	image := v.Ledger.Last().Image
	cat := v.Catalog()
	fold := v.Fold(len(v.Overlays))
	state, err := fold.State()
	if err != nil {
		return nil, nil, err
	}
	// On a node that runs an image of a new recipe the overlays' tree
	// digests are checked against the line's tree, folded alongside.
	var canon *tree.Fold
	if v.Rebased() {
		canon = v.CanonFold(len(v.Overlays))
	}
	var todo []*archive.Archive
	states := map[string][2]tree.State{}
	for _, a := range archives {
		m := a.Manifest
		if m.Line != v.Ledger.Entries[0].Line {
			return nil, nil, fmt.Errorf("overlay %s belongs to line %s, node is on line %s: %w", m.Version, m.Line, v.Ledger.Entries[0].Line, ErrSequence)
		}
		if d, ok := applied[m.Version]; ok && len(todo) == 0 {
			if d != a.Digest {
				return nil, nil, fmt.Errorf("overlay %s (%s) forks the node's applied %s (%s): %w", m.Version, a.Digest, m.Version, d, ErrSequence)
			}
			rep.Plans = append(rep.Plans, Plan{Version: m.Version, Parent: m.Parent.Version, AlreadyApplied: true})
			continue
		}
		if err := checkParent(m, cur, known); err != nil {
			return nil, nil, err
		}
		ok, err := manifests.Satisfies(image, m.Requires.Image)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fmt.Errorf("overlay %s requires image %s, node's base image is %s: %w", m.Version, m.Requires.Image, image, ErrConstraint)
		}
		before := state
		fold = tree.Append(fold, archive.ManifestLayer(m))
		if state, err = fold.State(); err != nil {
			return nil, nil, fmt.Errorf("overlay %s does not fit the node's expected tree: %w: %w", m.Version, ErrSequence, tree.Cause(err))
		}
		d := state.Digest()
		if canon != nil {
			canon = tree.Append(canon, archive.ManifestLayer(m))
			cs, err := canon.State()
			if err != nil {
				return nil, nil, fmt.Errorf("overlay %s does not fit the line's tree: %w: %w", m.Version, ErrSequence, tree.Cause(err))
			}
			d = cs.Digest()
		}
		if d != m.TreeDigest {
			return nil, nil, fmt.Errorf("overlay %s: its changes give tree %s, manifest says %s: %w", m.Version, d, m.TreeDigest, ErrPayload)
		}
		states[m.Version] = [2]tree.State{before, state}
		plan := planFor(m, cat, before, state)
		rep.Plans = append(rep.Plans, plan)
		if m.Catalog != nil {
			cat = *m.Catalog
		}
		cur = manifests.Ref{Version: m.Version, Digest: a.Digest}
		known = append(known, cur)
		todo = append(todo, a)
	}
	return todo, states, nil
}

// checkParent checks that m continues head, and that its lineage agrees
// with what the node knows of its history (known: where the node started,
// the image or a regenerated image's head, then each overlay it applied,
// oldest first): a manifest naming the right parent over a forged or
// foreign history is refused.
func checkParent(m *manifests.OverlayManifest, head manifests.Ref, known []manifests.Ref) error {
	if m.Parent == head {
		return checkLineage(m, known)
	}
	if m.Parent.Version == head.Version {
		return fmt.Errorf("overlay %s: parent %s has digest %s but the node's %s is %s (a fork): %w", m.Version, m.Parent.Version, m.Parent.Digest, head.Version, head.Digest, ErrSequence)
	}
	if manifests.CompareVersions(m.Version, head.Version) <= 0 {
		return fmt.Errorf("overlay %s is not newer than the node's head %s (reorder): %w", m.Version, head.Version, ErrSequence)
	}
	inLineage := false
	for _, r := range m.Lineage {
		if r == head {
			inLineage = true
		}
		if r.Version == head.Version && r.Digest != head.Digest {
			return fmt.Errorf("overlay %s descends from a %s with digest %s, but the node's %s is %s (a fork): %w", m.Version, r.Version, r.Digest, head.Version, head.Digest, ErrSequence)
		}
	}
	missing := strings.Join(m.Ancestors(head.Version), ", ")
	if !m.Covers(head.Version) {
		// The node's head is older than the manifest's lineage window:
		// a gap at least that long (a fork would show when the missing
		// overlays are applied, each checked against its parent).
		return fmt.Errorf("overlay %s needs parent %s but the node's head is %s; missing: the overlays after %s up to %s (its lineage names the last %d: %s): %w",
			m.Version, m.Parent.Version, head.Version, head.Version, m.Parent.Version, len(m.Lineage), missing, ErrSequence)
	}
	if !inLineage {
		return fmt.Errorf("overlay %s does not descend from the node's head %s (%s); its line runs %s (a fork): %w", m.Version, head.Version, head.Digest, lineageVersions(m.Lineage), ErrSequence)
	}
	return fmt.Errorf("overlay %s needs parent %s but the node's head is %s; missing: %s: %w",
		m.Version, m.Parent.Version, head.Version, missing, ErrSequence)
}

// checkLineage requires every ref of known that m's lineage reaches back
// to (its window) in the lineage, in order.
func checkLineage(m *manifests.OverlayManifest, known []manifests.Ref) error {
	for len(known) > 0 && !m.Covers(known[0].Version) {
		known = known[1:]
	}
	i := 0
	for _, r := range m.Lineage {
		if i < len(known) && r == known[i] {
			i++
		}
	}
	if i == len(known) {
		return nil
	}
	k := known[i]
	for _, r := range m.Lineage {
		if r.Version == k.Version {
			return fmt.Errorf("overlay %s: its lineage has %s with digest %s, the node's history %s (a forged or foreign history): %w", m.Version, r.Version, r.Digest, k.Digest, ErrSequence)
		}
	}
	return fmt.Errorf("overlay %s: its lineage (%s) lacks %s (%s) of the node's history: %w", m.Version, lineageVersions(m.Lineage), k.Version, k.Digest, ErrSequence)
}

func lineageVersions(refs []manifests.Ref) string {
	vs := make([]string, len(refs))
	for i, r := range refs {
		vs[i] = r.Version
	}
	return strings.Join(vs, ", ")
}

// resolveDry shows what each plan would do on the node, as its restarter
// resolves it (for the running systemd: against the units running now).
func resolveDry(ctx context.Context, r Restarter, v *view.View, todo []*archive.Archive, states map[string][2]tree.State, rep *ApplyReport) error {
	if r == nil {
		return nil
	}
	cat := v.Catalog()
	for _, a := range todo {
		m := a.Manifest
		if m.Catalog != nil {
			cat = *m.Catalog
		}
		plan := &rep.Plans[indexOf(rep.Plans, m.Version)]
		res, err := r.Resolve(ctx, RestartPlan{Actions: plan.Actions, Catalog: cat, Changed: catalog.ChangedPaths(m, states[m.Version][0])})
		if err != nil {
			return err
		}
		plan.Live = res
	}
	return nil
}

// missingOverlays says which of the overlays want (from the first the
// store lacks, cause) the repository or bundle does not carry, as a
// sequence error: the node cannot take the ones after a gap.
func missingOverlays(ctx context.Context, r *repo.Repo, src Source, want []manifests.OverlayRef, cause error) error {
	var missing []string
	for _, ref := range want {
		if src.Through != "" && manifests.CompareVersions(ref.Version, src.Through) > 0 {
			break
		}
		if ok, err := repo.Exists(ctx, r.Store, ref.File); err == nil && !ok {
			missing = append(missing, ref.Version)
		}
		if len(missing) == 20 {
			missing = append(missing, "...")
			break
		}
	}
	if len(missing) == 0 {
		missing = []string{want[0].Version}
	}
	return fmt.Errorf("%s does not carry overlay %s the node needs next; missing: %s (%v; for a bundle: strata bundle --from the node's head): %w",
		r.Store, want[0].Version, strings.Join(missing, ", "), cause, ErrSequence)
}

// oldestFirst orders overlay files by the versions their manifests claim,
// oldest first, saying so when that is not the order given: a shell glob
// sorts 1.0.10 before 1.0.9. The claims are not trusted for anything
// else: each file is verified, and checked against its parent, in the
// order returned.
func oldestFirst(ctx context.Context, files []string, progress func(string)) ([]string, error) {
	if len(files) < 2 {
		return files, nil
	}
	versions := make(map[string]string, len(files))
	for _, f := range files {
		a, err := archive.OpenContext(ctx, f, sign.AnyKey())
		if err != nil {
			return nil, err
		}
		versions[f] = a.Manifest.Version
	}
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b string) int { return manifests.CompareVersions(versions[a], versions[b]) })
	if !slices.Equal(sorted, files) {
		var vs []string
		for _, f := range sorted {
			vs = append(vs, versions[f])
		}
		progress("the files were not given oldest first: applying them in version order, " + strings.Join(vs, ", "))
	}
	return sorted, nil
}
