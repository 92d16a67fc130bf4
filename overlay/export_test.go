package overlay

import (
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// NodeExpectation exposes, for external tests, what a node's state says:
// its line, head, lineage and the tree it should have.
func NodeExpectation(root string) (line string, head manifests.Ref, lineage []manifests.Ref, state tree.State, err error) {
	v, err := loadView(nodestate.Node{Root: root})
	if err != nil {
		return "", manifests.Ref{}, nil, nil, err
	}
	state, err = v.expected()
	if err != nil {
		return "", manifests.Ref{}, nil, nil, err
	}
	lineage = []manifests.Ref{v.ledger.Entries[0].Head}
	for _, e := range v.applied {
		lineage = append(lineage, e.Head)
	}
	return v.ledger.Entries[0].Line, v.head(), lineage, state, nil
}
