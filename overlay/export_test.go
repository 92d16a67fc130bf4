package overlay

import (
	"os"
	"sync"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// NodeExpectation exposes, for external tests, what a node's state says:
// its line, head, lineage and the tree it should have.
func NodeExpectation(root string) (line string, head manifests.Ref, lineage []manifests.Ref, state tree.State, err error) {
	v, err := loadView(node.Node{Root: root})
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

// The crash tests re-run the test binary with STRATA_TEST_CRASH set to a
// crash point; only test binaries honour it.
func init() {
	crashAt = sync.OnceValue(func() string { return os.Getenv("STRATA_TEST_CRASH") })
}
