package configedit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// ErrValidation reports an edit a service's validation command refused
// (overlay.ErrValidation: the same refusal overlay create makes).
var ErrValidation = overlay.ErrValidation

// Edit is a file's new content at an absolute image path.
type Edit struct {
	Path    string
	Content []byte
}

// SetOptions are the settings of Set.
type SetOptions struct {
	// Line picks the line (optional when the repository has one).
	Line string
	// Version of the overlay to publish; default the next patch version
	// after the head.
	Version string
	// Key signs the overlay; it must be one the line trusts at its head.
	Key *sign.Key
	// Parent is the head version the edits were made against (config
	// edit records it when it opens the editor): Set refuses with
	// overlay.ErrHeadMoved when the head is another one now. Default:
	// the head when Set starts.
	Parent string
	// Confirm, when set, sees the plan (diff, restart plan, validations
	// run) and decides whether to publish.
	Confirm func(*Plan) bool
	// Progress receives one line per step; nil is silent.
	Progress func(string)
}

// Plan is what publishing edits would do: the changes against the head,
// the restart plan, and the validation commands that passed.
type Plan struct {
	Report
	// Validated lists "UNIT: COMMAND" for each validation that passed.
	Validated []string `json:"validated"`
	// Published is the overlay written, when it was.
	Published *overlay.Created `json:"-"`
}

// Head returns the head version of line in the repository in directory
// repoDir: what an edit starts from.
func Head(ctx context.Context, repoDir, line string) (string, error) {
	_, c, err := open(ctx, repoDir, line, "")
	if err != nil {
		return "", err
	}
	return c.Head().Version, nil
}

// Set checks edits against the head of the line and publishes them as
// its next overlay, signed with o.Key: each file's syntax (CheckSyntax),
// then, when a service with a validation command claims a changed path,
// that command run in the head's tree with every edit in place (staged in
// a temporary directory, isolated as a build's run steps are). Nothing is
// published unless every check passes and Confirm (if set) agrees; the
// plan is returned either way.
func Set(ctx context.Context, repoDir string, edits []Edit, o SetOptions) (*Plan, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if o.Key == nil {
		return nil, errors.New("a signing key is needed to publish")
	}
	if len(edits) == 0 {
		return nil, errors.New("no file to set")
	}
	_, c, err := open(ctx, repoDir, o.Line, "")
	if err != nil {
		return nil, err
	}
	head := c.Head().Version
	if o.Parent == "" {
		o.Parent = head
	}
	if o.Parent != head {
		return nil, fmt.Errorf("the edit was made against %s, and line %s's head is now %s; start again from the head: %w", o.Parent, c.Line.Name, head, overlay.ErrHeadMoved)
	}
	byPath := map[string][]byte{}
	next := map[string]manifests.Entry{}
	for _, ed := range edits {
		rel, err := manifests.ImagePath(ed.Path)
		if err != nil {
			return nil, err
		}
		if _, dup := byPath[rel]; dup {
			return nil, fmt.Errorf("/%s given twice", rel)
		}
		if old, ok := c.State[rel]; ok && old.Type != manifests.TypeFile {
			return nil, fmt.Errorf("/%s is a %s at %s, not a file", rel, old.Type, head)
		}
		for a := manifests.Parent(rel); a != ""; a = manifests.Parent(a) {
			if e, ok := c.State[a]; ok && e.Type != manifests.TypeDir {
				return nil, fmt.Errorf("/%s is a %s at %s: edit the file itself, not a path through it", a, e.Type, head)
			}
		}
		if err := CheckSyntax(rel, ed.Content); err != nil {
			return nil, err
		}
		byPath[rel] = ed.Content
		sum := sha256.Sum256(ed.Content)
		e := manifests.Entry{Path: rel, Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(ed.Content)), SHA256: hex.EncodeToString(sum[:])}
		if old, ok := c.State[rel]; ok {
			e.Mode, e.UID, e.GID = old.Mode, old.UID, old.GID
		}
		next[rel] = e
	}
	plan := &Plan{Report: Report{Line: c.Line.Name, From: head, Changes: []Change{}}, Validated: []string{}}
	var changed []string
	for _, rel := range sortedKeys(byPath) {
		n := next[rel]
		old, had := c.State[rel]
		if had && old == n {
			continue // unchanged
		}
		ch := Change{Path: "/" + rel, Kind: "added", New: &n}
		if had {
			ch.Kind, ch.Old, ch.What = "modified", &old, manifests.EntryChanges(old, n)
		}
		ch.Diff, err = textDiff(ch, func(e manifests.Entry, side int) ([]byte, error) {
			if side == 1 {
				return byPath[rel], nil
			}
			return overlay.Content(ctx, c, e)
		})
		if err != nil {
			return nil, err
		}
		plan.Changes = append(plan.Changes, ch)
		changed = append(changed, rel)
	}
	if len(changed) == 0 {
		return plan, fmt.Errorf("nothing differs from head %s: %w", head, overlay.ErrEmpty)
	}
	plan.To = o.Version
	if plan.To == "" {
		v, err := manifests.ParseVersion(head)
		if err != nil {
			return nil, err
		}
		plan.To = v.IncPatch().String()
	}
	dirDir, err := scratch.MkdirTemp("config")
	if err != nil {
		return plan, fmt.Errorf("preparing the edit: %w", err)
	}
	defer dirDir.RemoveAll()
	dir := dirDir.Path
	var ch overlay.Change
	for i, rel := range changed {
		src := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(src, byPath[rel], 0o600); err != nil {
			return plan, fmt.Errorf("preparing the edit: %w", err)
		}
		ch.Adds = append(ch.Adds, overlay.Add{Dest: "/" + rel, Src: src})
	}
	// The plan is the one the overlay will carry, computed and validated
	// as publishing computes and validates it (a new or changed unit file
	// rebuilds the catalog); the create below finds the validation done.
	co := overlay.CreateOptions{Version: plan.To, Line: c.Line.Name, Parent: head, Progress: progress}
	p, err := overlay.Preview(ctx, repoDir, ch, co)
	if err != nil {
		return plan, err
	}
	plan.setServices(p.Manifest.Services)
	plan.Validated = p.Validation.Validated
	if o.Confirm != nil && !o.Confirm(plan) {
		return plan, nil
	}
	progress(fmt.Sprintf("publishing %s %s", c.Line.Name, plan.To))
	created, err := overlay.Create(ctx, repoDir, o.Key, ch, co)
	if err != nil {
		return plan, err
	}
	plan.Published = created
	return plan, nil
}

func sortedKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
