package dirfs

import "github.com/strata-dev/strata/internal/nodestate"

var _ nodestate.Backend = (*Backend)(nil)

func init() {
	nodestate.RegisterBackend(nodestate.BackendDir, func(n nodestate.Node, _ nodestate.BackendOptions) (nodestate.Backend, error) {
		return New(n), nil
	})
}
