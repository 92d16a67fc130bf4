package schema

// LayerIntegrity is how a node that stacks its overlays as layers
// (backend overlayfs) checks them: its mode, its layers by form, and the
// layer its last activation refused, if that still stands.
type LayerIntegrity struct {
	// Mode is LayersKernelVerified or LayersDigestChecked; a node whose
	// layers are all directories (written before layer images) is
	// LayersAudited.
	Mode string `json:"mode"`
	// Images and Directories count the applied layers by form.
	Images      int `json:"images"`
	Directories int `json:"directories"`
	// Refused is the layer image activation refused: the stacks hold
	// only the layers below it.
	Refused *LayerRefusal `json:"refused,omitempty"`
	// Unsigned are the stacked layers whose overlay's signed manifest
	// records no layer image (overlays made before strata recorded
	// them): each image is checked against the ledger's record of its
	// apply alone, which whoever can write the state partition can
	// change with it.
	Unsigned []string `json:"unsigned,omitempty"`
}

// Layer integrity modes.
const (
	// LayersKernelVerified: every read of a layer image is checked by
	// the kernel (dm-verity) against the root hash its apply recorded.
	LayersKernelVerified = "kernel-verified"
	// LayersDigestChecked: each layer image's SHA-256 is checked against
	// its apply's record before it is mounted (loop, read-only).
	LayersDigestChecked = "digest-checked at activation"
	// LayersAudited: layer directories, checked file by file by
	// verify-sequence --files only.
	LayersAudited = "directories, checked by the file audit"
)

// LayerRefusal is a layer image activation refused.
type LayerRefusal struct {
	Version string `json:"version"`
	Error   string `json:"error"`
	Time    string `json:"time"`
	// Cause is RefusedImage or RefusedRecord (empty in refusals
	// recorded before it: RefusedImage).
	Cause string `json:"cause,omitempty"`
}

// Causes of a layer refusal.
const (
	// RefusedImage: the layer image does not match the record of its
	// apply; strata restart --repair rewrites it from its overlay.
	RefusedImage = "image"
	// RefusedRecord: the record of the apply does not match the
	// overlay's signed manifest (or the manifest's signature fails):
	// the node's state was changed, which a repair cannot undo.
	RefusedRecord = "record"
)
