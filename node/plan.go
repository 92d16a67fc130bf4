package node

import (
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// planFor merges the overlay's recorded plan with the one the node's own
// catalog gives, so neither side can drop a restart, and settles each
// unit's action against the tree after the change (after).
func planFor(m *manifests.OverlayManifest, cat manifests.Catalog, before, after tree.State) Plan {
	p := Plan{Version: m.Version, Parent: m.Parent.Version, Deletes: m.Deletes, Writes: []string{}}
	for _, e := range m.Entries {
		p.Writes = append(p.Writes, e.Path)
	}
	own, unclaimed := catalog.Plan(cat, catalog.ChangedPaths(m, before))
	p.Actions = catalog.Settle(catalog.MergeActions(m.Services, own), before, after)
	p.Unclaimed = catalog.StillUnclaimed(unclaimed, p.Actions)
	if p.Unclaimed == nil {
		p.Unclaimed = []string{}
	}
	return p
}
