package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// Errors of whole-image upgrades.
var (
	// ErrUpgrade reports an image refused for an upgrade of the node
	// (another line, not newer, layers it cannot carry, ...).
	ErrUpgrade = manifests.Rejection("upgrade refused")
	// ErrUpgradeStaged reports a change refused because an upgrade is
	// staged (its kept layers would no longer be the node's) or the node
	// is on a trial boot of one.
	ErrUpgradeStaged = manifests.Rejection("an upgrade is staged")
	// ErrUnhealthy reports a trial boot whose health check failed.
	ErrUnhealthy = errors.New("the node is not healthy")
)

// UpgradeOptions configures PlanUpgrade.
type UpgradeOptions struct {
	// DropLayers takes off the layers the new image cannot carry (and
	// every layer above them) instead of refusing the upgrade.
	DropLayers bool
	// Compact asks for a switch to a regenerated image of the node's
	// head, whose tree must be the node's.
	Compact bool
}

// UpgradeRequest is one upgrade of a node.
type UpgradeRequest struct {
	// Raw is the new image's manifest, Sig its signature.
	Raw, Sig []byte
	UpgradeOptions
	// DryRun verifies the upgrade and changes nothing.
	DryRun bool
	// BootID is the running kernel's boot id when the node is the
	// running system, empty offline.
	BootID string
	// Write puts the image on the node's inactive root and its boot
	// entry in place (not called on a dry run).
	Write func(*UpgradePlan) (Slot, error)
}

// LayerRefusal is a layer an upgrade cannot carry, and why.
type LayerRefusal struct {
	Version string `json:"version"`
	Reason  string `json:"reason"`
}

// UpgradePlan is an upgrade of one node to one image, verified.
type UpgradePlan struct {
	Root string `json:"root"`
	// From is the image the node runs, To the new one.
	From manifests.Ref `json:"from"`
	To   manifests.Ref `json:"to"`
	// Head and TreeDigest are the node's after the upgrade.
	Head       manifests.Ref `json:"head"`
	TreeDigest string        `json:"tree_digest"`
	// Layers stay stacked above the new image; Dropped do not.
	Layers  []string       `json:"layers"`
	Dropped []LayerRefusal `json:"dropped,omitempty"`
	Compact bool           `json:"compact,omitempty"`
	// Image is the new image's verified manifest; Sig its signature.
	Image *repo.Image `json:"-"`
	Sig   []byte      `json:"-"`
	// Hierarchies are the new image's managed hierarchies.
	Hierarchies []string `json:"-"`
}

// Slot is where the caller of Upgrade put the new image: the root
// partition and the boot loader entry that boots it, which Commit makes
// bootable once the upgrade is staged.
type Slot struct {
	Name   string // manifests.SlotA or SlotB
	Entry  string // strata-N-SLOT.conf
	Commit func() error
}

// UpgradeReport describes an upgrade that was staged.
type UpgradeReport struct {
	*UpgradePlan
	Slot   string `json:"slot,omitempty"`
	Entry  string `json:"entry,omitempty"`
	DryRun bool   `json:"dry_run"`
}

// Upgrade verifies the image manifest req.Raw (signed by req.Sig) against the
// node, then, unless req.DryRun, calls req.Write to put the image on the
// node's inactive root and its boot entry in place, and stages the
// upgrade: the node's state then holds the record that its first healthy
// boot of the new image commits (Confirm). The node is locked throughout
// and nothing of it changes before the plan is verified.
func (h *Node) Upgrade(ctx context.Context, req UpgradeRequest) (*UpgradeReport, error) {
	b, raw, sig, o, dryRun, bootID, write := h.b, req.Raw, req.Sig, req.UpgradeOptions, req.DryRun, req.BootID, req.Write
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := b.Node()
	if err := refuseStaged(n, "upgrade"); err != nil {
		return nil, err
	}
	if err := refuseHeld(n, "an upgrade"); err != nil {
		return nil, err
	}
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	plan, err := planUpgrade(v, raw, sig, o)
	if err != nil {
		return nil, err
	}
	rep := &UpgradeReport{UpgradePlan: plan, DryRun: dryRun}
	if dryRun {
		return rep, nil
	}
	slot, err := write(plan)
	if err != nil {
		return rep, err
	}
	rep.Slot, rep.Entry = slot.Name, slot.Entry
	// What the node needs once it runs the new image: its manifest, and,
	// after an upgrade to a new recipe, the line's image the overlays'
	// tree digests fold from.
	if err := n.StoreImage(plan.Image.Digest, plan.Image.Raw, plan.Sig); err != nil {
		return rep, err
	}
	if !plan.Compact && v.Canon == v.Image {
		if err := n.StoreImage(v.Image.Digest, v.Image.Raw, v.ImageSig); err != nil {
			return rep, err
		}
	}
	u := &manifests.StagedUpgrade{
		Schema: manifests.Schema, Kind: manifests.KindUpgrade,
		Record: upgradeRecord(v, plan, slot.Name),
		From:   plan.From, Entry: slot.Entry, BootID: bootID,
		Staged: time.Now().UTC().Format(time.RFC3339),
	}
	if err := n.Stage(u); err != nil {
		return rep, err
	}
	fault.Point("upgrade-staged")
	// The entry goes live last: a crash before leaves a staged upgrade
	// no boot can try, which the next boot records as failed, and the
	// next upgrade (or status, offline) finds so. A failed
	// Commit keeps the staged state too: the rename may have happened.
	if err := slot.Commit(); err != nil {
		return rep, fmt.Errorf("making boot entry %s bootable (the upgrade stays staged; strata upgrade --cancel takes it back): %w", slot.Entry, err)
	}
	return rep, nil
}

// upgradeRecord is the ledger record of plan.
func upgradeRecord(v *view.View, plan *UpgradePlan, slot string) manifests.LedgerEntry {
	m := plan.Image.Manifest
	image := m.Version
	if m.Base != nil {
		image = m.Base.Version
	}
	var dropped []string
	for _, d := range plan.Dropped {
		dropped = append(dropped, d.Version)
	}
	return manifests.LedgerEntry{
		Action: manifests.LedgerUpgrade, Line: m.Line, Version: m.Version, Digest: plan.Image.Digest,
		Image: image, Head: plan.Head, TreeDigest: plan.TreeDigest,
		Slot: slot, Layers: plan.Layers, Dropped: dropped, Compact: plan.Compact,
	}
}

// planUpgrade checks the image against the node: signed by a key the node
// trusts, of its line, newer than the image it runs (or, to compact, a
// regenerated image of its head whose tree is the node's), and able to
// carry the node's layers.
func planUpgrade(v *view.View, raw, sig []byte, o UpgradeOptions) (*UpgradePlan, error) {
	n := v.N
	if name, err := n.Backend(); err != nil {
		return nil, err
	} else if name != nodestate.BackendOverlayfs {
		return nil, fmt.Errorf("node %s has the %s backend: whole-image upgrades need a node that boots a read-only image (a disk node): %w", n.Root, name, ErrUpgrade)
	}
	trust, err := n.TrustedKeys()
	if err != nil {
		return nil, err
	}
	im, err := repo.ParseImage(raw, sig, trust)
	if err != nil {
		return nil, fmt.Errorf("upgrade refused: %w", err)
	}
	m := im.Manifest
	line := v.Ledger.Entries[0].Line
	plan := &UpgradePlan{Root: n.Root, Image: im, Sig: sig, Compact: o.Compact, Hierarchies: m.Managed(), Layers: []string{},
		From: manifests.Ref{Version: v.Image.Manifest.Version, Digest: v.Image.Digest},
		To:   manifests.Ref{Version: m.Version, Digest: im.Digest}}
	switch {
	case m.Line != line:
		return nil, fmt.Errorf("image %s %s is of line %s, the node is on line %s: %w", m.Line, m.Version, m.Line, line, ErrUpgrade)
	case im.Digest == v.Image.Digest:
		return nil, fmt.Errorf("image %s %s is the image the node runs: %w", m.Line, m.Version, ErrUpgrade)
	}
	if !hasFile(m, manifests.ConfirmUnitPath) || !hasFile(m, manifests.ConfirmUnitLink) {
		return nil, fmt.Errorf("image %s %s has no /%s enabled by /%s (images built with the recipe key strata have them): its trial boot would be blessed without a health check: %w",
			m.Line, m.Version, manifests.ConfirmUnitPath, manifests.ConfirmUnitLink, ErrUpgrade)
	}
	if o.Compact {
		return planCompact(v, plan)
	}
	if m.Head != nil {
		return nil, fmt.Errorf("image %s %s is a regenerated image (line %s through %s): switching to one is compaction, --compact: %w", m.Line, m.Version, line, m.Head.Version, ErrUpgrade)
	}
	if manifests.CompareVersions(m.Version, v.Image.Manifest.Version) <= 0 {
		return nil, fmt.Errorf("image %s %s is not newer than the image the node runs, %s: %w", m.Line, m.Version, v.Image.Manifest.Version, ErrUpgrade)
	}
	// The layers the new image can carry: each in order must accept its
	// version, fit its tree, and have its record signed by a key the
	// image trusts there (its activation checks that: the image's keys
	// may have been rotated past a layer's). The first that does not is
	// dropped with every layer above it, which builds on it.
	f := tree.Base(m.Files)
	state, err := f.State()
	if err != nil {
		return nil, fmt.Errorf("image %s %s: %w", m.Line, m.Version, err)
	}
	keys, err := im.Trust()
	if err != nil {
		return nil, fmt.Errorf("image %s %s: %w", m.Line, m.Version, err)
	}
	for i, om := range v.Overlays {
		if len(plan.Dropped) > 0 {
			plan.Dropped = append(plan.Dropped, LayerRefusal{Version: om.Version, Reason: "above a dropped layer"})
			continue
		}
		why := ""
		if ok, err := manifests.Satisfies(m.Version, om.Requires.Image); err != nil {
			return nil, err
		} else if !ok {
			why = fmt.Sprintf("requires image %s", om.Requires.Image)
		} else if out := outside(om, plan.Hierarchies); out != "" {
			why = fmt.Sprintf("changes /%s, outside the image's managed hierarchies (%s)", out, strings.Join(plan.Hierarchies, ", "))
		} else if next, _, err := n.SignedRecord(keys, v.Applied[i]); err != nil {
			why = fmt.Sprintf("its record is not signed by a key the image trusts: %v", err)
		} else {
			keys = next
			next := tree.Append(f, archive.ManifestLayer(om))
			if s, err := next.State(); err != nil {
				why = fmt.Sprintf("does not fit the image's tree: %v", tree.Cause(err))
			} else {
				f, state = next, s
			}
		}
		if why != "" {
			plan.Dropped = append(plan.Dropped, LayerRefusal{Version: om.Version, Reason: why})
			continue
		}
		plan.Layers = append(plan.Layers, v.Applied[i].Version)
	}
	// A node that runs (or compacted onto) a regenerated image has
	// overlays folded into it that no layer holds: an image of a recipe
	// does not have them.
	if h := v.Canon.Manifest.Head; h != nil {
		return nil, fmt.Errorf("the node's image %s folds the line's overlays through %s into its tree, and image %s %s does not carry them (no layer holds them any more): upgrade it to a regenerated image of the line (--compact), or provision it afresh: %w",
			v.Canon.Manifest.Version, h.Version, m.Line, m.Version, ErrUpgrade)
	}
	if len(plan.Dropped) > 0 && !o.DropLayers {
		var what []string
		for _, d := range plan.Dropped {
			what = append(what, d.Version+" ("+d.Reason+")")
		}
		return nil, fmt.Errorf("image %s %s cannot carry the node's layers %s; --drop-layers takes them off (the node's head then goes back to the last layer kept): %w", m.Line, m.Version, strings.Join(what, "; "), ErrUpgrade)
	}
	plan.Head = v.Ledger.Canonical().Head
	if k := len(plan.Layers); k > 0 {
		plan.Head = v.Applied[k-1].Head
	}
	plan.TreeDigest = state.Digest()
	return plan, nil
}

// planCompact checks a switch to a regenerated image of the node's head:
// built from the line's image, through the node's head, with the node's
// tree. Every layer is folded into it.
func planCompact(v *view.View, plan *UpgradePlan) (*UpgradePlan, error) {
	m := plan.Image.Manifest
	head := v.Head()
	lineImage := v.Canon.Digest
	if b := v.Canon.Manifest.Base; b != nil {
		lineImage = b.Digest
	}
	want := v.Ledger.Last().TreeDigest
	switch {
	case m.Head == nil || m.Base == nil:
		return nil, fmt.Errorf("image %s %s is not a regenerated image (strata regenerate --through %s makes one): --compact switches to one: %w", m.Line, m.Version, head.Version, ErrUpgrade)
	case m.Base.Digest != lineImage:
		return nil, fmt.Errorf("image %s %s was regenerated from image %s (%s), not the line's image the node started from (%s): %w", m.Line, m.Version, m.Base.Version, m.Base.Digest, lineImage, ErrUpgrade)
	case *m.Head != head:
		return nil, fmt.Errorf("image %s %s folds the line through %s (%s), the node's head is %s (%s): regenerate through the node's head: %w", m.Line, m.Version, m.Head.Version, m.Head.Digest, head.Version, head.Digest, ErrUpgrade)
	case v.Rebased():
		return nil, fmt.Errorf("the node runs image %s, not the line's image: its tree is not the line's and no regenerated image has it: %w", v.Image.Manifest.Version, ErrUpgrade)
	case m.TreeDigest != want:
		return nil, fmt.Errorf("image %s %s has tree %s, the node's expected tree is %s: %w", m.Line, m.Version, m.TreeDigest, want, ErrUpgrade)
	}
	plan.Head, plan.TreeDigest = head, want
	return plan, nil
}

// refuseStaged refuses op while an upgrade is staged.
func refuseStaged(n nodestate.Node, op string) error {
	u, err := n.Staged()
	if err != nil || u == nil {
		return err
	}
	return fmt.Errorf("node %s: an upgrade to image %s (root %s, boot entry %s) is staged since %s; %s waits until it is confirmed by a healthy boot or cancelled (strata upgrade --cancel): %w",
		n.Root, u.Record.Version, u.Record.Slot, u.Entry, u.Staged, op, ErrUpgradeStaged)
}

// refuseTrial refuses op on a trial boot of a staged upgrade, whose
// ledger is not confirmed yet.
func refuseTrial(n nodestate.Node, op string) error {
	ev, err := n.Effective()
	if err != nil || !ev.Trial {
		return err
	}
	return fmt.Errorf("node %s is on a trial boot of image %s: %s waits until the boot is confirmed healthy (strata upgrade --confirm): %w", n.Root, ev.Staged.Record.Version, op, ErrUpgradeStaged)
}

// outside returns a path om changes outside the hierarchies hier, or a
// hierarchy it deletes or replaces; "" if none (the overlayfs backend's
// Check, against the new image's hierarchies).
func outside(om *manifests.OverlayManifest, hier []string) string {
	in := func(p string) string {
		for _, h := range hier {
			if manifests.Within(p, h) {
				return h
			}
		}
		return ""
	}
	for _, d := range om.Deletes {
		if h := in(d); h == "" || d == h {
			return d
		}
	}
	for _, e := range om.Entries {
		if h := in(e.Path); h == "" || (e.Path == h && e.Type != manifests.TypeDir) {
			return e.Path
		}
	}
	return ""
}

// hasFile reports whether image m has path p.
func hasFile(m *manifests.ImageManifest, p string) bool {
	return slices.ContainsFunc(m.Files, func(e manifests.Entry) bool { return e.Path == p })
}
