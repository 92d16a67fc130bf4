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

func diffEntry(want, got manifests.Entry) string {
	var parts []string
	if want.Type != got.Type {
		parts = append(parts, fmt.Sprintf("type %s, expected %s", got.Type, want.Type))
	}
	if want.SHA256 != got.SHA256 || want.Size != got.Size {
		parts = append(parts, "content changed")
	}
	if want.Mode != got.Mode {
		parts = append(parts, fmt.Sprintf("mode %04o, expected %04o", uint32(got.Mode), uint32(want.Mode)))
	}
	if want.UID != got.UID || want.GID != got.GID {
		parts = append(parts, fmt.Sprintf("owner %d:%d, expected %d:%d", got.UID, got.GID, want.UID, want.GID))
	}
	if want.Target != got.Target {
		parts = append(parts, fmt.Sprintf("link target %q, expected %q", got.Target, want.Target))
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
