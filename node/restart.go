package node

import (
	"context"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
)

// Restarter carries out a node's restart plans on its service manager.
// The engine asks what a plan means on the node (Resolve, also for a dry
// run), has it carried out (Run), and, when a change is taken back after
// its restarts began, has the units returned to the old tree (Undo).
// Package node/restarter holds the restarters strata ships: Exec carries
// plans out as recorded; Systemd resolves them against the running
// manager first.
type Restarter interface {
	// Resolve decides what plan means on the node, changing nothing. It
	// returns nil for a restarter that carries plans out as recorded.
	Resolve(ctx context.Context, plan RestartPlan) (*systemd.Resolved, error)
	// Run carries out plan as res resolved it (nil: as recorded), one
	// report per action done. It stops at the first failure, an
	// ErrRestart.
	Run(ctx context.Context, plan RestartPlan, res *systemd.Resolved, report func(manifests.ServiceAction)) error
	// Undo restarts what plan acted on after its change was taken back:
	// fwd is how Run resolved it (nil if it was not resolved), of whose
	// unit steps reached were tried.
	Undo(ctx context.Context, plan RestartPlan, fwd *systemd.Resolved, reached int, report func(manifests.ServiceAction)) error
}

// RestartPlan is a plan's actions and what resolving them on a live node
// needs: the catalog in effect and the tree paths the change touched.
type RestartPlan struct {
	Actions []manifests.ServiceAction
	Catalog manifests.Catalog
	Changed []string
	// RestartFailed marks an operator's restart (strata restart,
	// restart-pending): units the manager has failed are restarted too,
	// so that a unit whose last restart failed can come back and settle
	// its debt. A change's plan never starts a unit that is not running.
	RestartFailed bool
}

// runPlan resolves a plan through r and carries it out, returning the
// resolution (nil where r carries plans out as recorded). What the units
// it restarted or reloaded loaded is recorded (ln), whether or not a
// later step failed; failing to record that does not fail the plan (the
// units are then judged by their files' change times), it is reported
// as a progress line.
func runPlan(ctx context.Context, r Restarter, plan RestartPlan, ln loadNote, report func(manifests.ServiceAction)) (*systemd.Resolved, error) {
	res, err := r.Resolve(ctx, plan)
	if err != nil {
		return nil, err
	}
	var done []manifests.ServiceAction
	err = r.Run(ctx, plan, res, func(a manifests.ServiceAction) {
		done = append(done, a)
		report(a)
	})
	if rerr := ln.record(ctx, plan.Catalog, done); rerr != nil {
		ln.progress("warning: " + rerr.Error())
	}
	return res, err
}

// rebootDue lists what a resolution deferred to the next boot.
func rebootDue(res *systemd.Resolved) []manifests.ServiceAction {
	if res == nil {
		return nil
	}
	var out []manifests.ServiceAction
	for _, h := range res.Deferred {
		why := string(h.Reason)
		if h.Detail != "" {
			why += ": " + h.Detail
		}
		out = append(out, manifests.ServiceAction{Unit: h.Unit, Action: h.Action, Because: append([]string{why}, h.Because...)})
	}
	return out
}
