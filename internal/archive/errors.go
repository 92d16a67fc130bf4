package archive

import "github.com/strata-dev/strata/manifests"

// Errors reported by this package; package overlay re-exports them under
// the same names.
var (
	// ErrPayload reports payload members that disagree with the manifest.
	ErrPayload = manifests.Rejection("payload does not match manifest")
	// ErrFormat reports an archive that is not a strata overlay.
	ErrFormat = manifests.Rejection("not a strata overlay archive")
	// ErrNoBase reports a file shipped as a patch whose base content (the
	// path's content before the overlay) is not at hand: on a node, a
	// file that drifted from the node's head.
	ErrNoBase = manifests.Rejection("the content a patch was made against is not at hand")
)
