package node

import (
	"fmt"
	"path"
	"strings"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// HistoryEntry is one ledger record as strata node history shows it.
type HistoryEntry struct {
	manifests.LedgerEntry
	// KeyID is the key that signed the overlay of an apply or failed
	// record: for an overlay in effect, verified again from the manifest
	// the node keeps (it must hash to the record's digest and verify with
	// the keys trusted when it was applied); for others, as the record
	// says (the signer verified at the time; records of older strata
	// versions have none).
	KeyID string `json:"key_id,omitempty"`
	// InEffect marks the apply records of the overlays the node runs.
	InEffect bool `json:"in_effect,omitempty"`
	// Reverts is the overlay an applied overlay in effect undoes, as its
	// verified manifest says.
	Reverts string `json:"reverts,omitempty"`
}

// NodeHistory is a node's ledger, oldest first, with what it owes.
type NodeHistory struct {
	Root string        `json:"root"`
	Line string        `json:"line"`
	Head manifests.Ref `json:"head"`
	// Image is the version of the image the node runs.
	Image   string         `json:"image"`
	Entries []HistoryEntry `json:"entries"`
	// Pending are the restarts the node still owes (restart debt).
	Pending []manifests.ServiceAction `json:"pending_restarts"`
	// Staged is an upgrade waiting for its trial boot, if any.
	Staged *manifests.StagedUpgrade `json:"staged_upgrade,omitempty"`
}

// History reads the node's ledger (validated, its hash chain checked) as
// a history. It takes no lock and changes nothing.
func (h *Node) History() (*NodeHistory, error) {
	root := h.root
	n := h.b.Node()
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	keys, err := n.TrustedKeys()
	if err != nil {
		return nil, err
	}
	l := v.Ledger
	hist := &NodeHistory{Root: root, Line: l.Entries[0].Line, Head: v.Head(), Image: v.Image.Manifest.Version,
		Entries: make([]HistoryEntry, 0, len(l.Entries)), Pending: l.PendingRestarts(), Staged: v.Staged}
	if hist.Pending == nil {
		hist.Pending = []manifests.ServiceAction{}
	}
	// Each overlay in effect was verified, when it was applied, with the
	// keys its line trusted then: the image's, as the rotations before it
	// changed them. An overlay signed by a key revoked since is named too.
	signers := map[int]string{}
	reverts := map[int]string{}
	then, err := v.Canon.Trust()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", root, err)
	}
	for _, e := range v.Applied {
		var m *manifests.OverlayManifest
		signers[e.Seq], m = storedSigner(n, then, e)
		if signers[e.Seq] == "" {
			// A node provisioned at a head, or upgraded since: its
			// image lists the keys of a later point of the line.
			signers[e.Seq], m = storedSigner(n, keys, e)
		}
		if m != nil && m.Reverts != nil {
			reverts[e.Seq] = m.Reverts.Version
		}
		if m != nil {
			if then, err = then.After(m); err != nil {
				then = keys
			}
		}
	}
	// On a trial boot the view holds the staged upgrade's record, which
	// is not in the ledger until the boot commits it.
	committed, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	for _, e := range committed.Entries {
		id, inEffect := signers[e.Seq]
		if !inEffect {
			id = e.Signer
		}
		he := HistoryEntry{LedgerEntry: e, InEffect: inEffect, KeyID: id, Reverts: reverts[e.Seq]}
		hist.Entries = append(hist.Entries, he)
	}
	return hist, nil
}

// storedSigner returns the key that signed the manifest of applied
// overlay e as the node keeps it, and the manifest, or "" and nil when it
// is not there, does not hash to e's digest or no key of keys verifies it.
func storedSigner(n nodestate.Node, keys *sign.KeySet, e manifests.LedgerEntry) (string, *manifests.OverlayManifest) {
	rel := path.Join(manifests.StateDir, "overlays", e.Version+".json")
	raw, err := safefile.Read(n.Path(rel), manifests.MaxManifestSize)
	if err != nil || manifests.Digest(raw) != e.Digest {
		return "", nil
	}
	sig, err := safefile.Read(n.Path(rel+".minisig"), sign.MaxSignatureSize)
	if err != nil {
		return "", nil
	}
	id, err := keys.VerifyFor(raw, sig, sign.OverlayComment(e.Line, e.Version))
	if err != nil {
		return "", nil
	}
	var m manifests.OverlayManifest
	if manifests.Decode(raw, &m) != nil || m.Validate() != nil {
		return id, nil
	}
	return id, &m
}

// Describe says in a line what a ledger record did.
func Describe(e manifests.LedgerEntry) string {
	switch e.Action {
	case manifests.LedgerProvision:
		if e.Head.Version != e.Version {
			return fmt.Sprintf("provisioned from image %s at %s", e.Version, e.Head.Version)
		}
		return "provisioned from image " + e.Version
	case manifests.LedgerApply:
		if len(e.Overwrote) > 0 {
			return fmt.Sprintf("applied %s, overwriting what was changed on the node: /%s", e.Version, strings.Join(e.Overwrote, ", /"))
		}
		return "applied " + e.Version
	case manifests.LedgerRollback:
		return fmt.Sprintf("rolled back %s, head %s", e.Version, e.Head.Version)
	case manifests.LedgerFailed:
		if e.Slot != "" {
			return fmt.Sprintf("upgrade to image %s (root %s) failed: %s", e.Version, e.Slot, e.Error)
		}
		return fmt.Sprintf("apply of %s failed and was taken back: %s", e.Version, e.Error)
	case manifests.LedgerRestart:
		if e.Offline {
			return "restart debt settled offline (the next boot starts every service with the tree)"
		}
		if e.Error != "" {
			return "restart failed, owed until a restart passes: " + e.Error
		}
		return "restarts carried out"
	case manifests.LedgerRepair:
		return fmt.Sprintf("repaired layers %v", e.Repaired)
	case manifests.LedgerRefused:
		return fmt.Sprintf("layer %s refused at activation, stacked without it and the layers above: %s", e.Version, e.Error)
	case manifests.LedgerUpgrade:
		what := "upgraded to image " + e.Version
		if e.Compact {
			what = "compacted onto image " + e.Version
		}
		return fmt.Sprintf("%s on root %s, head %s", what, e.Slot, e.Head.Version)
	}
	return string(e.Action) + " " + e.Version
}
