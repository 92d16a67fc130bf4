package overlayfs

import "github.com/strata-dev/strata/internal/node"

var (
	_ node.Activator      = (*Backend)(nil)
	_ node.LayerRebuilder = (*Backend)(nil)
)

func init() {
	node.RegisterBackend(node.BackendOverlayfs, open)
}

// open opens the backend of node n, whose root becomes the absolute path
// without links that the mount table shows.
func open(n node.Node, o node.BackendOptions) (node.Backend, error) {
	root, err := node.Canonical(n.Root)
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
