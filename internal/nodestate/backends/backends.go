package backends

import (
	// dirfs registers nodestate.BackendDir.
	_ "github.com/strata-dev/strata/internal/nodestate/dirfs"
	// overlayfs registers nodestate.BackendOverlayfs.
	_ "github.com/strata-dev/strata/internal/nodestate/overlayfs"
)
