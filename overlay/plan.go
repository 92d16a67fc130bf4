package overlay

import (
	"sort"
	"strings"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// changedPaths lists every path an overlay changes in the tree before it:
// its entries, its deletes and everything below them, and the contents of
// directories it replaces with something else. Sorted.
func changedPaths(m *manifests.OverlayManifest, before tree.State) []string {
	var out []string
	gone := append([]string{}, m.Deletes...)
	for _, e := range m.Entries {
		out = append(out, e.Path)
		if old, ok := before[e.Path]; ok && old.Type == manifests.TypeDir && e.Type != manifests.TypeDir {
			gone = append(gone, e.Path)
		}
	}
	out = append(out, m.Deletes...)
	for _, d := range gone {
		for p := range before {
			if p != d && manifests.Within(p, d) {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// planFor merges the overlay's recorded plan with the one the node's own
// catalog gives, so neither side can drop a restart, and settles each
// unit's action against the tree after the change (after).
func planFor(m *manifests.OverlayManifest, cat manifests.Catalog, before, after tree.State) Plan {
	p := Plan{Version: m.Version, Parent: m.Parent.Version, Deletes: m.Deletes, Writes: []string{}}
	for _, e := range m.Entries {
		p.Writes = append(p.Writes, e.Path)
	}
	own, unclaimed := catalog.Plan(cat, changedPaths(m, before))
	p.Actions = settle(mergeActions(m.Services, own), before, after)
	p.Unclaimed = stillUnclaimed(unclaimed, p.Actions)
	if p.Unclaimed == nil {
		p.Unclaimed = []string{}
	}
	return p
}

// settle fits each action to what the change did to its unit: a unit
// whose definition the change removed is stopped (after a daemon-reload),
// not restarted, and a unit it brought back (a rollback of a removal) is
// restarted, not stopped. Units defined outside the tree are left alone.
func settle(actions []manifests.ServiceAction, before, after tree.State) []manifests.ServiceAction {
	out := make([]manifests.ServiceAction, 0, len(actions))
	for _, a := range actions {
		was, is := unitPresent(before, a.Unit), unitPresent(after, a.Unit)
		switch {
		case was && !is:
			a.Action, a.DaemonReload = manifests.ActionStop, true
		case is && a.Action == manifests.ActionStop:
			a.Action, a.DaemonReload = manifests.ActionRestart, true
		}
		out = append(out, a)
	}
	return out
}

// unitPresent reports whether state defines unit in one of the unit
// directories, directly or, for an instance such as getty@tty1.service,
// through its template (a symlink to /dev/null masks it).
func unitPresent(state tree.State, unit string) bool {
	names := []string{unit}
	if at := strings.IndexByte(unit, '@'); at > 0 {
		if dot := strings.LastIndexByte(unit, '.'); dot > at {
			names = append(names, unit[:at+1]+unit[dot:])
		}
	}
	for _, name := range names {
		for _, d := range unitDirs {
			if e, ok := state[d+name]; ok {
				return !(e.Type == manifests.TypeSymlink && e.Target == "/dev/null")
			}
		}
	}
	return false
}
