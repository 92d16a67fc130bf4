package node

import (
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// Expected returns what the node's state says its tree should be: its
// line, its head, the heads of its image and of the overlays in effect
// (oldest first), and the expected tree. It changes nothing.
func (h *Node) Expected() (line string, head manifests.Ref, lineage []manifests.Ref, state tree.State, err error) {
	v, err := view.Load(h.state())
	if err != nil {
		return "", manifests.Ref{}, nil, nil, err
	}
	state, err = v.Expected()
	if err != nil {
		return "", manifests.Ref{}, nil, nil, err
	}
	lineage = []manifests.Ref{v.Ledger.Entries[0].Head}
	for _, e := range v.Applied {
		lineage = append(lineage, e.Head)
	}
	return v.Ledger.Entries[0].Line, v.Head(), lineage, state, nil
}
