package catalog

import (
	"sort"

	"github.com/strata-dev/strata/manifests"
)

// claim is what a change to one path means for one unit.
type claim struct {
	unit         string
	action       manifests.Action
	daemonReload bool
}

// planIndex maps paths onto claims: exact paths (unit files, binaries,
// libraries) and directories or files whose subtree is claimed (declared
// paths).
type planIndex struct {
	exact map[string][]claim
	tree  map[string][]claim
}

func newPlanIndex(cat manifests.Catalog) planIndex {
	ix := planIndex{exact: map[string][]claim{}, tree: map[string][]claim{}}
	for _, s := range cat.Services {
		for _, p := range s.UnitFiles {
			ix.exact[p] = append(ix.exact[p], claim{s.Unit, manifests.ActionRestart, true})
		}
		for _, list := range [][]string{s.Binaries, s.Libraries} {
			for _, p := range list {
				ix.exact[p] = append(ix.exact[p], claim{s.Unit, manifests.ActionRestart, false})
			}
		}
		for _, p := range s.Paths {
			ix.tree[p] = append(ix.tree[p], claim{s.Unit, manifests.ActionRestart, false})
		}
		for _, p := range s.ReloadPaths {
			ix.tree[p] = append(ix.tree[p], claim{s.Unit, manifests.ActionReload, false})
		}
	}
	return ix
}

// claims returns every claim on changed path p.
func (ix planIndex) claims(p string) []claim {
	out := append([]claim(nil), ix.exact[p]...)
	// Walk p and its ancestors, down to the root "": a declared entry
	// claims p when p lies within it (manifests.Within).
	for dir := p; ; dir = manifests.Parent(dir) {
		out = append(out, ix.tree[dir]...)
		if dir == "" {
			break
		}
	}
	return out
}

// Plan returns the restart plan for a set of changed (added, modified or
// deleted) tree paths against catalog cat: one ServiceAction per unit
// (sorted by unit), and the changed paths no service claims (sorted).
//
// A changed unit file means restart with DaemonReload; a changed binary or
// library, or a path within a declared path, means restart; a path within
// a reload path means reload. Restart wins over reload (see
// [manifests.MergeAction]). Because lists the changed paths behind each
// action.
func Plan(cat manifests.Catalog, changed []string) (actions []manifests.ServiceAction, unclaimed []string) {
	ix := newPlanIndex(cat)
	due := map[string]manifests.ServiceAction{}
	left := pathSet{}
	for _, p := range changed {
		cs := ix.claims(p)
		if len(cs) == 0 {
			left.add(p)
			continue
		}
		for _, c := range cs {
			due[c.unit] = manifests.MergeAction(due[c.unit], manifests.ServiceAction{
				Unit:         c.unit,
				Action:       c.action,
				DaemonReload: c.daemonReload,
				Because:      []string{p},
			})
		}
	}
	for _, a := range due {
		actions = append(actions, a)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].Unit < actions[j].Unit })
	return actions, left.sorted()
}
