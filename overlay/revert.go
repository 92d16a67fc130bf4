package overlay

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// ErrRevertConflict reports an overlay to revert whose paths later
// overlays changed too: undoing it would undo part of them.
var ErrRevertConflict = manifests.Rejection("later overlays changed the same paths")

// RevertOptions are the settings of Revert.
type RevertOptions struct {
	// Line picks the line (optional when the repository has one).
	Line string
	// Version of the overlay to publish; default the head's next patch.
	Version string
	// Force reverts even when later overlays changed the same paths:
	// those paths go back to what they were before the reverted overlay.
	Force bool
	// DryRun plans the revert and publishes nothing (the validation
	// commands still run, as for a dry run of Create).
	DryRun bool
	// SkipValidation and Progress are CreateOptions'.
	SkipValidation string
	Progress       func(string)
}

// Reverted is what Revert did or would do.
type Reverted struct {
	// Reverts is the overlay undone; Version the new overlay's.
	Reverts manifests.Ref `json:"reverts"`
	Version string        `json:"version"`
	// Restores are the paths set back to what they were before Reverts;
	// Deletes the paths Reverts added, removed.
	Restores []string `json:"restores"`
	Deletes  []string `json:"deletes"`
	// Conflicts name the later overlays that changed the same paths
	// (with Force they are reverted over).
	Conflicts []string `json:"conflicts,omitempty"`
	// Created is the overlay published (nil on a dry run).
	Created *Created `json:"-"`
	// Validation is what the services' validation commands said of the
	// revert.
	Validation *Validation `json:"validation,omitempty"`
}

// Revert publishes, as the next overlay of its line in the repository in
// directory repoDir, the change that undoes overlay version against the
// head: every path it wrote goes back to what it was before it (or is
// deleted, when it did not exist), every path it deleted comes back. The
// sequence never rewrites history: this is how a bad overlay is
// withdrawn. When later overlays changed the same paths it refuses with
// ErrRevertConflict, naming them, unless o.Force.
func Revert(ctx context.Context, repoDir, version string, key *sign.Key, o RevertOptions) (*Reverted, error) {
	r, err := repo.Open(ctx, repoDir, nil)
	if err != nil {
		return nil, err
	}
	c, err := LoadChain(ctx, r, o.Line, "", nil)
	if err != nil {
		return nil, err
	}
	k := -1
	for i, a := range c.Overlays {
		if a.Manifest.Version == version {
			k = i
		}
	}
	switch {
	case k < 0 && version == c.Image.Manifest.Version:
		return nil, fmt.Errorf("reverting %s: it is line %s's image, not an overlay; only overlays can be reverted: %w", version, c.Line.Name, ErrSequence)
	case k < 0:
		return nil, fmt.Errorf("reverting %s: line %s has no overlay %s (its overlays: %s): %w", version, c.Line.Name, version, versionRange(c), ErrSequence)
	}
	v := c.Overlays[k].Manifest
	if v.Keys != nil {
		return nil, fmt.Errorf("reverting %s: it is a key rotation, which a revert does not undo; publish the opposite rotation with strata key rotate (--add, --revoke): %w", version, ErrSequence)
	}
	parent := v.Parent.Version
	before, err := LoadChain(ctx, r, c.Line.Name, parent, nil)
	if err != nil {
		return nil, err
	}
	pre := before.State
	rev := &Reverted{Reverts: manifests.Ref{Version: v.Version, Digest: c.Overlays[k].Digest}, Version: o.Version, Restores: []string{}, Deletes: []string{}}
	touched := touchedPaths(v, pre)
	// Paths V created: the revert deletes them, with whatever later
	// overlays put below them.
	created := map[string]bool{}
	for p := range touched {
		if _, had := pre[p]; !had {
			created[p] = true
		}
	}
	for _, a := range c.Overlays[k+1:] {
		if hit := overlapping(a.Manifest, touched, created); len(hit) > 0 {
			rev.Conflicts = append(rev.Conflicts, fmt.Sprintf("%s (/%s)", a.Manifest.Version, strings.Join(hit, ", /")))
		}
	}
	head := c.Head()
	if undone(touched, pre, c.State) {
		// Nothing to put back: later overlays (a revert before this one,
		// say) already did. Say so rather than call them conflicts.
		by := ""
		if len(rev.Conflicts) > 0 {
			by = " by " + strings.Join(rev.Conflicts, "; ")
		}
		return rev, fmt.Errorf("reverting %s: its changes are already undone at the head %s%s: %w", version, head.Version, by, ErrEmpty)
	}
	if len(rev.Conflicts) > 0 && !o.Force {
		return rev, fmt.Errorf("reverting %s: later overlays changed the same paths: %s; --force puts back what %s changed over them: %w", version, strings.Join(rev.Conflicts, "; "), version, ErrRevertConflict)
	}
	if rev.Version == "" {
		hv, err := manifests.ParseVersion(head.Version)
		if err != nil {
			return nil, err
		}
		rev.Version = hv.IncPatch().String()
	}
	dirDir, err := scratch.MkdirTemp("revert")
	if err != nil {
		return nil, fmt.Errorf("reverting %s: %w", version, err)
	}
	defer dirDir.RemoveAll()
	dir := dirDir.Path
	var ch Change
	var replaced []string // restored non-directories: what V put below them goes with them
	for _, p := range sortedPaths(touched) {
		e, had := pre[p]
		now, has := c.State[p]
		switch {
		case !had && has && !underAny(p, ch.Deletes) && !underAny(p, replaced):
			ch.Deletes = append(ch.Deletes, "/"+p)
			rev.Deletes = append(rev.Deletes, "/"+p)
		case had && (!has || now != e):
			x, err := exactEntry(ctx, before, dir, e)
			if err != nil {
				return nil, fmt.Errorf("reverting %s: /%s: %w", version, p, err)
			}
			ch.Exact = append(ch.Exact, x)
			rev.Restores = append(rev.Restores, "/"+p)
			if e.Type != manifests.TypeDir {
				replaced = append(replaced, "/"+p)
			}
		}
	}
	if len(rev.Restores)+len(rev.Deletes) == 0 {
		return rev, fmt.Errorf("reverting %s: the head %s has none of its changes left: %w", version, head.Version, ErrEmpty)
	}
	co := CreateOptions{Version: rev.Version, Line: c.Line.Name, Parent: head.Version, SkipValidation: o.SkipValidation, Progress: o.Progress, reverts: &rev.Reverts}
	if o.DryRun {
		p, err := Preview(ctx, repoDir, ch, co)
		if err == nil {
			rev.Validation = p.Validation
		}
		return rev, err
	}
	rev.Created, err = Create(ctx, repoDir, key, ch, co)
	if err == nil {
		rev.Validation = rev.Created.Validation
	}
	return rev, err
}

// undone reports whether every path in touched is in state now as it was
// in pre: present with the same entry, or absent.
func undone(touched map[string]bool, pre, now tree.State) bool {
	for p := range touched {
		e, had := pre[p]
		n, has := now[p]
		if had != has || (had && n != e) {
			return false
		}
	}
	return true
}

// touchedPaths returns the paths overlay m changes in tree pre: those it
// writes, and those it deletes with everything below them.
func touchedPaths(m *manifests.OverlayManifest, pre tree.State) map[string]bool {
	out := map[string]bool{}
	for _, e := range m.Entries {
		out[e.Path] = true
		// A directory it replaced with something else goes back whole.
		if old, ok := pre[e.Path]; ok && old.Type == manifests.TypeDir && e.Type != manifests.TypeDir {
			for p := range pre {
				if manifests.Within(p, e.Path) {
					out[p] = true
				}
			}
		}
	}
	for _, d := range m.Deletes {
		for p := range pre {
			if manifests.Within(p, d) {
				out[p] = true
			}
		}
	}
	return out
}

// overlapping returns the paths overlay m changes that a revert of the
// touched paths would undo: a touched path it writes or deletes (or
// deletes a directory above), or a path it writes below one of created
// (which the revert deletes), sorted.
func overlapping(m *manifests.OverlayManifest, touched, created map[string]bool) []string {
	hit := map[string]bool{}
	for _, e := range m.Entries {
		if touched[e.Path] {
			hit[e.Path] = true
		}
		for a := manifests.Parent(e.Path); a != ""; a = manifests.Parent(a) {
			if created[a] {
				hit[e.Path] = true
			}
		}
	}
	for _, d := range m.Deletes {
		for p := range touched {
			if manifests.Within(p, d) {
				hit[p] = true
			}
		}
	}
	return sortedPaths(hit)
}

func sortedPaths(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func underAny(p string, deletes []string) bool {
	for _, d := range deletes {
		if manifests.Within(p, strings.TrimPrefix(d, "/")) {
			return true
		}
	}
	return false
}

// exactEntry returns entry e of the tree before (a chain's head) for
// Change.Exact, a file's content written to a new file under dir.
func exactEntry(ctx context.Context, before *Chain, dir string, e manifests.Entry) (ExactEntry, error) {
	if e.Type != manifests.TypeFile {
		return ExactEntry{Entry: e}, nil
	}
	b, err := contentBelow(ctx, before, before.Len(), e.Path, e.SHA256, -1)
	if err != nil {
		return ExactEntry{}, err
	}
	f, err := os.CreateTemp(dir, "content-")
	if err != nil {
		return ExactEntry{}, err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return ExactEntry{Entry: e, Src: f.Name()}, err
}

// versionRange names the first and last overlay versions of c ("none").
func versionRange(c *Chain) string {
	switch n := len(c.Overlays); n {
	case 0:
		return "none"
	case 1:
		return c.Overlays[0].Manifest.Version
	default:
		return c.Overlays[0].Manifest.Version + " to " + c.Overlays[n-1].Manifest.Version
	}
}
