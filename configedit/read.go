package configedit

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// ErrNoFile reports a path that is not a file at the version asked for.
var ErrNoFile = manifests.Rejection("no such file at that version")

// maxDiffText bounds the files Diff shows line by line.
const maxDiffText = 1 << 20

// open opens the repository in directory repoDir (publishing and reading
// back contents need its files) and loads line at version (empty: the
// head, from its head state).
func open(ctx context.Context, repoDir, line, version string) (*repo.Repo, *overlay.Chain, error) {
	r, err := repo.Open(ctx, repoDir, nil)
	if err != nil {
		return nil, nil, err
	}
	var c *overlay.Chain
	if version == "" {
		c, err = repo.LoadHead(ctx, r, line)
	} else {
		c, err = overlay.LoadChain(ctx, r, line, version, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	return r, c, nil
}

// Get returns the content of the file at absolute image path p as of
// version (empty: the line's head) of line (empty: the only line) in the
// repository in directory repoDir, and the version it read.
func Get(ctx context.Context, repoDir, line, p, version string) ([]byte, string, error) {
	b, at, _, _, err := get(ctx, repoDir, line, p, version)
	return b, at, err
}

// get is Get, with the chain it read and the tree path.
func get(ctx context.Context, repoDir, line, p, version string) ([]byte, string, *overlay.Chain, string, error) {
	rel, err := manifests.ImagePath(p)
	if err != nil {
		return nil, "", nil, "", err
	}
	_, c, err := open(ctx, repoDir, line, version)
	if err != nil {
		return nil, "", nil, "", err
	}
	at := c.Head().Version
	e, ok := c.State[rel]
	if !ok || e.Type != manifests.TypeFile {
		return nil, at, nil, "", fmt.Errorf("%w: line %s has no file /%s at %s", ErrNoFile, c.Line.Name, rel, at)
	}
	b, err := overlay.Content(ctx, c, e)
	return b, at, c, rel, err
}

// Change is one path that differs between two trees.
type Change struct {
	Path string `json:"path"`
	// Kind is "added", "removed" or "modified".
	Kind string           `json:"kind"`
	Old  *manifests.Entry `json:"old,omitempty"`
	New  *manifests.Entry `json:"new,omitempty"`
	// What lists what changed of a modified path: "content", "mode
	// 0644 -> 0600", "owner 0:0 -> 1:1", "type", "target".
	What []string `json:"what,omitempty"`
	// Diff is a unified diff of a text file's content (files up to
	// 1 MiB of UTF-8 text; empty otherwise).
	Diff string `json:"diff,omitempty"`
	// Units are the services the change touches, with their action.
	Units []string `json:"units,omitempty"`
}

// Report is what changed between two versions of a line, and the restart
// plan the changes call for.
type Report struct {
	Line     string                    `json:"line"`
	From     string                    `json:"from"`
	To       string                    `json:"to"`
	Changes  []Change                  `json:"changes"`
	Services []manifests.ServiceAction `json:"services"`
}

// Diff compares versions v1 and v2 of line in the repository in
// directory repoDir: every path added, removed or modified, text diffs of
// changed files, and the services the changes touch (the catalog at v2
// decides).
func Diff(ctx context.Context, repoDir, line, v1, v2 string) (*Report, error) {
	if v1 == "" || v2 == "" {
		return nil, fmt.Errorf("config diff: two versions are needed")
	}
	_, c1, err := open(ctx, repoDir, line, v1)
	if err != nil {
		return nil, err
	}
	_, c2, err := open(ctx, repoDir, line, v2)
	if err != nil {
		return nil, err
	}
	return compare(ctx, c1, c2, func(e manifests.Entry, side int) ([]byte, error) {
		c := c1
		if side == 1 {
			c = c2
		}
		return overlay.Content(ctx, c, e)
	}, c2.Catalog)
}

// compare lists the differences from tree c1 to tree c2, contents read
// through content (side 0: the old tree, 1: the new).
func compare(ctx context.Context, c1, c2 *overlay.Chain, content func(manifests.Entry, int) ([]byte, error), cat manifests.Catalog) (*Report, error) {
	rep := &Report{Line: c2.Line.Name, From: c1.Head().Version, To: c2.Head().Version, Changes: []Change{}}
	var paths []string
	for p := range c1.State {
		paths = append(paths, p)
	}
	for p := range c2.State {
		if _, ok := c1.State[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o, inOld := c1.State[p]
		n, inNew := c2.State[p]
		if inOld && inNew && o == n {
			continue
		}
		ch := Change{Path: "/" + p}
		switch {
		case !inOld:
			ch.Kind, ch.New = "added", &n
		case !inNew:
			ch.Kind, ch.Old = "removed", &o
		default:
			ch.Kind, ch.Old, ch.New, ch.What = "modified", &o, &n, manifests.EntryChanges(o, n)
		}
		if d, err := textDiff(ch, content); err != nil {
			return nil, err
		} else {
			ch.Diff = d
		}
		rep.Changes = append(rep.Changes, ch)
	}
	changed := make([]string, 0, len(rep.Changes))
	for _, ch := range rep.Changes {
		changed = append(changed, strings.TrimPrefix(ch.Path, "/"))
	}
	rep.plan(cat, changed)
	return rep, nil
}

// plan fills in the restart plan for the changed paths and, on each
// change, the units it touches.
func (rep *Report) plan(cat manifests.Catalog, changed []string) {
	actions, _ := catalog.Plan(cat, changed)
	rep.setServices(actions)
}

// setServices records the restart plan and, on each change, the units it
// touches.
func (rep *Report) setServices(actions []manifests.ServiceAction) {
	rep.Services = actions
	if rep.Services == nil {
		rep.Services = []manifests.ServiceAction{}
	}
	units := map[string][]string{}
	for _, a := range rep.Services {
		for _, p := range a.Because {
			units[p] = append(units[p], string(a.Action)+" "+a.Unit)
		}
	}
	for i := range rep.Changes {
		rep.Changes[i].Units = units[strings.TrimPrefix(rep.Changes[i].Path, "/")]
	}
}

// textDiff returns a unified diff of ch's old and new file contents when
// both sides that exist are files of UTF-8 text up to maxDiffText.
func textDiff(ch Change, content func(manifests.Entry, int) ([]byte, error)) (string, error) {
	var sides [2][]byte
	for i, e := range []*manifests.Entry{ch.Old, ch.New} {
		if e == nil {
			continue
		}
		if e.Type != manifests.TypeFile || e.Size > maxDiffText {
			return "", nil
		}
		if i == 1 && ch.Old != nil && ch.Old.SHA256 == e.SHA256 {
			return "", nil // same content: mode or owner only
		}
		b, err := content(*e, i)
		if err != nil {
			return "", err
		}
		if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			return "", nil
		}
		sides[i] = b
	}
	from, to := "a"+ch.Path, "b"+ch.Path
	if ch.Old == nil {
		from = "/dev/null"
	}
	if ch.New == nil {
		to = "/dev/null"
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(sides[0]), B: lines(sides[1]), FromFile: from, ToFile: to, Context: 3,
	})
}

// lines splits text into lines that each end in a newline (a last line
// without one is marked as diff does).
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	out := strings.SplitAfter(string(b), "\n")
	if out[len(out)-1] == "" {
		return out[:len(out)-1]
	}
	out[len(out)-1] += "\n\\ No newline at end of file\n"
	return out
}
