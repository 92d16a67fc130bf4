package node

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

func auditFiles(ctx context.Context, a *schema.Audit, v *nodeView, b nodestate.Backend) error {
	a.FilesChecked = true
	want, err := v.expected()
	if err != nil {
		a.Problem("chain", "", "%v", err)
		return nil
	}
	got, err := b.Scan(ctx)
	if err != nil {
		return err
	}
	drift := driftOf(want, got)
	for _, d := range drift {
		a.Problem("drift", d.path, "%s", d.msg)
	}
	sort.Slice(a.Findings, func(i, j int) bool { return a.Findings[i].Path < a.Findings[j].Path })
	d := manifests.TreeDigest(withoutStateParents(got, want))
	if d != v.ledger.Last().TreeDigest && len(drift) == 0 {
		a.Problem("drift", "", "tree digest %s, ledger says %s", d, v.ledger.Last().TreeDigest)
	}
	a.TreeDigest = d
	return nil
}

// drifted is a path where the node's tree is not the expected one.
type drifted struct {
	path string
	msg  string
}

// driftOf compares the node's tree got with the expected tree want.
func driftOf(want tree.State, got []manifests.Entry) []drifted {
	have := tree.NewState(got)
	var drift []drifted
	for p, w := range want {
		g, ok := have[p]
		switch {
		case !ok:
			drift = append(drift, drifted{p, fmt.Sprintf("/%s is missing", p)})
		case g != w:
			drift = append(drift, drifted{p, fmt.Sprintf("/%s differs: %s", p, diffEntry(w, g))})
		}
	}
	for p, g := range have {
		if _, ok := want[p]; !ok {
			if g.Type == manifests.TypeDir && manifests.Within(manifests.StateDir, p) {
				continue // a parent of the state directory that strata made
			}
			drift = append(drift, drifted{p, fmt.Sprintf("/%s is not part of the expected tree", p)})
		}
	}
	sort.Slice(drift, func(i, j int) bool { return drift[i].path < drift[j].path })
	return drift
}

// diffEntry says how got differs from want, as an audit reports drift:
// "mode 0600, expected 0644; content changed".
func diffEntry(want, got manifests.Entry) string {
	var parts []string
	for _, d := range manifests.EntryDiffs(want, got) {
		switch d.Field {
		case "content":
			parts = append(parts, "content changed")
		case "target":
			parts = append(parts, fmt.Sprintf("link target %q, expected %q", d.New, d.Old))
		default:
			parts = append(parts, fmt.Sprintf("%s %s, expected %s", d.Field, d.New, d.Old))
		}
	}
	return strings.Join(parts, "; ")
}

// withoutStateParents drops directories strata created only to hold its
// state directory (such as /var when the image has none).
func withoutStateParents(got []manifests.Entry, want tree.State) []manifests.Entry {
	out := got[:0:0]
	for _, e := range got {
		if _, ok := want[e.Path]; !ok && e.Type == manifests.TypeDir && manifests.Within(manifests.StateDir, e.Path) {
			continue
		}
		out = append(out, e)
	}
	return out
}
