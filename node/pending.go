package node

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// SettleReport describes a restart-pending run.
type SettleReport struct {
	Root      string                    `json:"root"`
	Pending   []manifests.ServiceAction `json:"pending"`
	Restarted []manifests.ServiceAction `json:"restarted"`
	// Live is the debt as resolved against the running service manager.
	Live *systemd.Resolved `json:"live,omitempty"`
}

// SettlePending carries out the node's restart debt — restarts recorded as
// pending by applies and rollbacks that ran without a restarter — through
// the node's Restarter and records them in the ledger. Each unit is acted
// on once, restart winning over reload. A failure stops the run; what was
// done so far is recorded. On an Offline node it settles the debt
// without running anything (settleOffline).
func (h *Node) SettlePending(ctx context.Context) (*SettleReport, error) {
	if h.o.Offline {
		return h.settleOffline(ctx)
	}
	progress, r, b, root := h.o.Progress, h.o.Restarter, h.b, h.root
	if r == nil {
		return nil, fmt.Errorf("settling restarts on %s: no restarter given", root)
	}
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := refuseTrial(b.Node(), "restart-pending"); err != nil {
		return nil, err
	}
	n := b.Node()
	l, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	rep := &SettleReport{Root: root, Pending: l.PendingRestarts(), Restarted: []manifests.ServiceAction{}}
	cat := manifests.Catalog{}
	if v, err := view.Load(n); err == nil {
		cat = v.Catalog()
	}
	res, runErr := runPlan(ctx, r, RestartPlan{Actions: rep.Pending, Catalog: cat, RestartFailed: true}, h.noteFor("restart-pending"), func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		if a.Unit != "" {
			rep.Restarted = append(rep.Restarted, a)
		}
	})
	settled := rep.Restarted
	if res != nil {
		// Resolved against the running manager: what ran were instances
		// and aliases' units; the whole debt is settled when it all ran.
		settled = nil
		if runErr == nil {
			settled = rep.Pending
		}
		rep.Live = res
	}
	if err := recordRestarts(n, l, settled, rebootDue(res)); err != nil {
		return rep, err
	}
	return rep, runErr
}

// settleOffline settles the restart debt of a node that is not running
// (on a disk): nothing runs, since the next boot starts every service
// with the node's tree, which is what the debt asks for. The debt is
// recorded as settled in a restart record marked Offline. A node without
// debt is not written to.
func (h *Node) settleOffline(ctx context.Context) (*SettleReport, error) {
	b, root := h.b, h.root
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := b.Node()
	if err := refuseTrial(n, "restart-pending"); err != nil {
		return nil, err
	}
	l, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	rep := &SettleReport{Root: root, Pending: l.PendingRestarts(), Restarted: []manifests.ServiceAction{}}
	if len(rep.Pending) == 0 {
		return rep, nil
	}
	last := l.Last()
	if _, err := n.Commit(l, manifests.LedgerEntry{
		Action: manifests.LedgerRestart, Line: last.Line, Version: last.Version, Digest: last.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Done: rep.Pending, Offline: true,
		Time: time.Now().UTC().Format(time.RFC3339),
	}); err != nil {
		return rep, err
	}
	rep.Restarted = rep.Pending
	return rep, nil
}
