package overlayfs

import "github.com/strata-dev/strata/internal/nodestate"

var (
	_ nodestate.Activator      = (*Backend)(nil)
	_ nodestate.LayerRebuilder = (*Backend)(nil)
)

func init() {
	nodestate.RegisterBackend(nodestate.BackendOverlayfs, open)
}

// open opens the backend of node n, whose root becomes the absolute path
// without links that the mount table shows.
func open(n nodestate.Node, o nodestate.BackendOptions) (nodestate.Backend, error) {
	root, err := nodestate.Canonical(n.Root)
	if err != nil {
		return nil, err
	}
	n.Root = root
	hs, err := o.Hierarchies(n)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithHierarchies(hs)}
	if o.Run != "" {
		opts = append(opts, WithRun(o.Run))
	}
	return New(n, opts...), nil
}
