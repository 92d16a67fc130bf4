package backends

import (
	// dirfs registers node.BackendDir.
	_ "github.com/strata-dev/strata/internal/nodestate/dirfs"
	// overlayfs registers node.BackendOverlayfs.
	_ "github.com/strata-dev/strata/internal/nodestate/overlayfs"
)
