package node

import (
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// Status is what a node is and what it owes.
type Status struct {
	Root    string `json:"root"`
	Backend string `json:"backend"`
	Line    string `json:"line"`
	// Image is the image the node was provisioned from (or its head, for
	// a regenerated image).
	Image manifests.Ref `json:"image"`
	// Running is the image the node runs when a whole-image upgrade
	// changed it, and Slot its root partition.
	Running *manifests.Ref `json:"running,omitempty"`
	Slot    string         `json:"slot,omitempty"`
	// RootIntegrity says, on a booted disk node, whether the kernel
	// checks its root image's blocks (dm-verity).
	RootIntegrity *RootIntegrity `json:"root_integrity,omitempty"`
	// Upgrade is a whole-image upgrade staged and not confirmed yet.
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`
	Head    manifests.Ref  `json:"head"`
	// Layers are the overlays in effect, oldest first.
	Layers []string `json:"layers"`
	// Active reports, for an overlayfs node, whether its stacks are in
	// place (activated since boot).
	Active *bool `json:"active,omitempty"`
	// LayerIntegrity says, for a node that stacks layers, how they are
	// checked, and names a layer image its activation refused.
	LayerIntegrity *schema.LayerIntegrity `json:"layer_integrity,omitempty"`
	// Interrupted describes what a crash left for the next run.
	Interrupted string `json:"interrupted,omitempty"`
	// Pending are restarts due (restart debt).
	Pending []manifests.ServiceAction `json:"pending_restarts"`
	// Reboot are units that take a change only at the next boot.
	Reboot []manifests.ServiceAction `json:"reboot_required"`
	// LastFailure is the newest failed attempt, if the node's head has not
	// moved since.
	LastFailure *manifests.LedgerEntry `json:"last_failure,omitempty"`
	// Held is the node's hold, if it is held (Hold).
	Held *manifests.Hold `json:"held,omitempty"`
	// Units are the managed units' configs: on disk, at the head, and as
	// each unit loaded them; UnitsError says why they could not be read.
	Units      []schema.UnitConfig `json:"units"`
	UnitsError string              `json:"units_error,omitempty"`
}

// UpgradeStatus is a staged upgrade: waiting for the next boot
// (UpgradeStaged), on its trial boot, waiting for the health check
// (UpgradeTrial), or, read offline, interrupted before its boot entry
// went live, so that no boot will try it (UpgradeInterrupted).
type UpgradeStatus struct {
	State  string        `json:"state"`
	Image  manifests.Ref `json:"image"`
	Slot   string        `json:"slot"`
	Entry  string        `json:"entry"`
	Staged string        `json:"staged"`
}

// UpgradeStatus states.
const (
	UpgradeStaged      = "staged"
	UpgradeTrial       = "trial"
	UpgradeInterrupted = "interrupted"
)

// Status reads the node's status. It changes nothing.
func (h *Node) Status(ctx context.Context) (*Status, error) {
	b, root := h.b, h.root
	n := b.Node()
	ev, err := n.Effective()
	if err != nil {
		return nil, err
	}
	l := ev.Ledger
	st := &Status{Root: root, Line: l.Entries[0].Line, Image: l.Entries[0].Head, Head: l.Last().Head,
		Layers: []string{}, Pending: l.PendingRestarts(), Reboot: []manifests.ServiceAction{}}
	if st.Backend, err = n.Backend(); err != nil {
		return nil, err
	}
	if run := l.Running(); run.Action == manifests.LedgerUpgrade {
		st.Running, st.Slot = &manifests.Ref{Version: run.Version, Digest: run.Digest}, run.Slot
	}
	st.RootIntegrity = rootIntegrity(root)
	if u := ev.Staged; u != nil {
		st.Upgrade = &UpgradeStatus{State: UpgradeStaged, Image: manifests.Ref{Version: u.Record.Version, Digest: u.Record.Digest},
			Slot: u.Record.Slot, Entry: u.Entry, Staged: u.Staged}
		if ev.Trial {
			st.Upgrade.State = UpgradeTrial
		}
	}
	for _, e := range l.Applied() {
		st.Layers = append(st.Layers, e.Version)
	}
	if lv, ok := b.(interface{ Live() (bool, error) }); ok {
		active, err := lv.Live()
		if err != nil {
			return nil, err
		}
		st.Active = &active
	}
	if lr, ok := b.(nodestate.LayerRebuilder); ok {
		if st.LayerIntegrity, err = lr.LayerIntegrity(); err != nil {
			return nil, err
		}
	}
	if st.Interrupted, err = b.Interrupted(); err != nil {
		return nil, err
	}
	if st.Held, err = n.Held(); err != nil {
		return nil, err
	}
	st.Reboot = rebootRequired(l, bootTime(root))
	for i := len(l.Entries) - 1; i > 0; i-- {
		e := l.Entries[i]
		if e.Action == manifests.LedgerApply || e.Action == manifests.LedgerRollback || e.Action == manifests.LedgerUpgrade {
			break
		}
		if e.Action == manifests.LedgerFailed || e.Action == manifests.LedgerRestart && e.Error != "" && stillOwed(e.Pending, st.Pending) {
			st.LastFailure = &e
			break
		}
	}
	st.Units = []schema.UnitConfig{}
	v, err := view.Load(n)
	if err == nil {
		var units []schema.UnitConfig
		if units, err = h.unitConfigs(ctx, v, owedUnits(st)); err == nil {
			st.Units = units
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		st.UnitsError = err.Error()
	}
	return st, nil
}

// rebootRequired lists the units restart records deferred to a reboot
// since the node last booted, one per unit.
func rebootRequired(l *manifests.Ledger, booted time.Time) []manifests.ServiceAction {
	due := map[string]manifests.ServiceAction{}
	for _, e := range l.Entries {
		t, err := time.Parse(time.RFC3339, e.Time)
		if err != nil || t.Before(booted) {
			continue
		}
		for _, a := range e.Reboot {
			due[a.Unit] = manifests.MergeAction(due[a.Unit], a)
		}
	}
	out := []manifests.ServiceAction{}
	for _, a := range due {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
	return out
}

// bootTime is when the node at root last booted: when its stacks were
// activated (RUN/strata/activated, on the per-boot /run) when it has
// them, else the kernel's boot time.
func bootTime(root string) time.Time {
	if raw, err := safefile.Read(filepath.Join(root, "run", "strata", "activated"), 64); err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(raw))); err == nil {
			return t
		}
	}
	raw, err := safefile.Read("/proc/stat", 1<<20)
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			if secs, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64); err == nil {
				return time.Unix(secs, 0)
			}
		}
	}
	return time.Time{}
}

// stillOwed reports whether a unit of failed (a failed restart's debt)
// is still in pending, the node's restart debt now.
func stillOwed(failed, pending []manifests.ServiceAction) bool {
	for _, f := range failed {
		for _, p := range pending {
			if p.Unit == f.Unit {
				return true
			}
		}
	}
	return false
}
