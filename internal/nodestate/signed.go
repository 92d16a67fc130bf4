package nodestate

import (
	"fmt"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// UnsignedLayer is a layer record SignedRecords accepted without a
// signature over its layer image: the overlay's signed manifest records
// none (it was created before strata recorded layer images).
type UnsignedLayer struct{ Version string }

// SignedRecords checks the records of applied overlays (oldest first)
// against their stored, signed manifests, with trust as the keys the
// node's image trusts: each stored manifest's signature (for its line
// and version) by a key trusted at its place in the sequence (a key
// rotation verified there changes the keys for the overlays above it,
// as it did when they were applied), its digest against the record, and
// the layer image the record names against the one the signed manifest
// records. It returns the index of the first record that fails, with
// why, or -1; and the layer records that no signature covers. Nothing
// is changed.
//
// The ledger is a hash chain without a secret: whoever can write the
// state partition can make a layer image and its record agree. This is
// what ties both to the line's keys again, with keys from the image
// (read-only, and kernel-verified on a dm-verity root).
func (n Node) SignedRecords(trust *sign.KeySet, applied []manifests.LedgerEntry) (int, []UnsignedLayer, error) {
	var unsigned []UnsignedLayer
	for i, e := range applied {
		next, signed, err := n.SignedRecord(trust, e)
		if err != nil {
			return i, unsigned, err
		}
		if !signed {
			unsigned = append(unsigned, UnsignedLayer{Version: e.Version})
		}
		trust = next
	}
	return -1, unsigned, nil
}

// SignedRecord checks one record as SignedRecords does, with trust as
// the keys trusted at its place, and returns the keys trusted above it
// and whether a signature covers the layer image it records (a record
// of a layer directory has none to cover: true).
func (n Node) SignedRecord(trust *sign.KeySet, e manifests.LedgerEntry) (*sign.KeySet, bool, error) {
	m, err := n.signedManifest(trust, e)
	if err != nil {
		return nil, false, fmt.Errorf("overlay %s: %w", e.Version, err)
	}
	signed := true
	switch {
	case e.Layer == nil:
	case m.Layer == nil:
		signed = false
	case *m.Layer != *e.Layer:
		return nil, false, fmt.Errorf("overlay %s: the ledger records layer image sha256 %s (%d bytes, root hash %s), its signed manifest sha256 %s (%d bytes, root hash %s): the record was changed after the apply: %w",
			e.Version, e.Layer.SHA256, e.Layer.Size, e.Layer.RootHash, m.Layer.SHA256, m.Layer.Size, m.Layer.RootHash, ErrDrift)
	}
	next, err := trust.After(m)
	if err != nil {
		return nil, false, fmt.Errorf("overlay %s: %w", e.Version, err)
	}
	return next, signed, nil
}

// signedManifest reads the stored manifest of the applied overlay e and
// checks it: signed by trust for e's line and version, and the document
// e's digest names.
func (n Node) signedManifest(trust *sign.KeySet, e manifests.LedgerEntry) (*manifests.OverlayManifest, error) {
	p := filepath.Join(n.ManifestStore(), e.Version+".json")
	sig, err := safefile.Read(p+".minisig", sign.MaxSignatureSize)
	if err != nil {
		return nil, fmt.Errorf("its stored signature: %w", err)
	}
	raw, err := safefile.Read(p, manifests.MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("its stored manifest: %w", err)
	}
	if d := manifests.Digest(raw); d != e.Digest {
		return nil, fmt.Errorf("stored manifest %s has digest %s, the ledger records %s: %w", p, d, e.Digest, ErrDrift)
	}
	if _, err := trust.VerifyFor(raw, sig, sign.OverlayComment(e.Line, e.Version)); err != nil {
		return nil, fmt.Errorf("stored manifest %s, with the keys the image trusts: %w", p, err)
	}
	var m manifests.OverlayManifest
	if err := manifests.Decode(raw, &m); err != nil {
		return nil, fmt.Errorf("stored manifest %s: %w", p, err)
	}
	if m.Line != e.Line || m.Version != e.Version {
		return nil, fmt.Errorf("stored manifest %s is of %s %s, the ledger records %s %s: %w", p, m.Line, m.Version, e.Line, e.Version, ErrDrift)
	}
	return &m, nil
}
