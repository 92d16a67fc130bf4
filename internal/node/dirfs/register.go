package dirfs

import "github.com/strata-dev/strata/internal/node"

var _ node.Backend = (*Backend)(nil)

func init() {
	node.RegisterBackend(node.BackendDir, func(n node.Node, _ node.BackendOptions) (node.Backend, error) {
		return New(n), nil
	})
}
