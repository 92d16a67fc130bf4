package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// RestartReport describes a restart of a node's services.
type RestartReport struct {
	Root string `json:"root"`
	// Units are the units asked for: the managed services unless named.
	Units []string `json:"units"`
	// Restarted are the actions carried out.
	Restarted []manifests.ServiceAction `json:"restarted"`
	// Live is the request as resolved against the running service
	// manager (only running units restart; units that cannot restart
	// safely wait for a reboot).
	Live *systemd.Resolved `json:"live,omitempty"`
	// Repair is what a repair before the restarts did (restart --repair).
	Repair *RepairReport `json:"repair,omitempty"`
}

// CheckUnits refuses, with ErrUnknownUnit, a unit the node's catalog does
// not have; it changes nothing (restart --repair checks before it
// repairs).
func (h *Node) CheckUnits(units []string) error {
	v, err := view.Load(h.state())
	if err != nil {
		return err
	}
	return catalog.KnownUnits(v.Catalog(), units)
}

// Restart restarts units of the node (default: the catalog's managed
// services) through its Restarter, as an apply restarts what it
// touched: with the Systemd restarter only running units restart, each
// once, then each must be active and pass its check command. It touches
// no file of the tree and no unit it was not asked for. The restarts are
// recorded in the ledger, settling any debt those units had.
func (h *Node) Restart(ctx context.Context, units []string) (*RestartReport, error) {
	progress, r, b, root := h.o.Progress, h.o.Restarter, h.b, h.root
	if r == nil {
		return nil, fmt.Errorf("restarting services on %s: no restarter given", root)
	}
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := refuseTrial(b.Node(), "restart"); err != nil {
		return nil, err
	}
	n := b.Node()
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	cat := v.Catalog()
	if len(units) == 0 {
		units = catalog.Managed(cat)
	}
	rep := &RestartReport{Root: root, Units: units, Restarted: []manifests.ServiceAction{}}
	if err := catalog.KnownUnits(cat, units); err != nil {
		return nil, err
	}
	if err := h.refuseBadConfig(ctx, v, units); err != nil {
		return nil, err
	}
	var actions []manifests.ServiceAction
	for _, u := range units {
		actions = append(actions, manifests.ServiceAction{Unit: u, Action: manifests.ActionRestart, Because: []string{"strata restart"}})
	}
	res, runErr := runPlan(ctx, r, RestartPlan{Actions: actions, Catalog: cat, RestartFailed: true}, h.noteFor("restart"), func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		if a.Unit != "" {
			rep.Restarted = append(rep.Restarted, a)
		}
	})
	rep.Live = res
	if runErr != nil {
		// Not one of them counts as done: which unit failed, and what
		// the others run now, is for the operator to find out. Every unit
		// asked for is owed a restart, with the error, until a restart
		// that passes settles it.
		if err := recordFailedRestart(n, v.Ledger, actions, runErr); err != nil {
			return rep, errors.Join(runErr, err)
		}
		return rep, runErr
	}
	if err := recordRestarts(n, v.Ledger, rep.Restarted, rebootDue(res)); err != nil {
		return rep, err
	}
	return rep, nil
}

// refuseBadConfig refuses, with ErrValidation, to restart a unit whose
// config changed on disk since it loaded it and fails its validation
// (schema.UnitBad): nothing restarts onto a config that is known bad.
// When the units cannot be judged the restart goes ahead, and a progress
// line says why they were not.
func (h *Node) refuseBadConfig(ctx context.Context, v *view.View, units []string) error {
	ucs, err := h.unitConfigs(ctx, v, nil)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.o.Progress("warning: the units' config was not checked before restarting: " + err.Error())
		return nil
	}
	asked := map[string]bool{}
	for _, u := range units {
		asked[u] = true
		asked[catalog.TemplateOf(u)] = true
	}
	for _, uc := range ucs {
		if asked[uc.Unit] && uc.State == schema.UnitBad {
			return fmt.Errorf("restarting %s on %s: %w: %s", uc.Unit, h.root, ErrValidation, uc.Note)
		}
	}
	return nil
}
