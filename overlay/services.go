package overlay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/strata-dev/strata/internal/suggest"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
)

// ErrUnknownUnit reports a unit the node's catalog does not have.
var ErrUnknownUnit = errors.New("overlay: unit not in the node's catalog")

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

// Managed lists the services a catalog manages: those declared with
// paths, reload paths, a validate or a check command (recipe services or
// X-Strata-* unit keys), sorted as the catalog is.
func Managed(cat manifests.Catalog) []string {
	var out []string
	for _, s := range cat.Services {
		if len(s.Paths)+len(s.ReloadPaths)+len(s.Validate)+len(s.Check) > 0 {
			out = append(out, s.Unit)
		}
	}
	return out
}

// knownUnits refuses a unit cat does not have.
func knownUnits(cat manifests.Catalog, units []string) error {
	for _, u := range units {
		if serviceOf(cat, u).Unit == "" {
			return fmt.Errorf("%w: %s (strata health lists the node's units; the image's catalog is in its manifest)", ErrUnknownUnit, u)
		}
	}
	return nil
}

// catalogHas refuses a unit of units (given with flag) that is no unit
// name, or, unless anyUnit, that cat does not have, itself or as an
// instance of a template unit it has, naming the closest units it does
// have: a typo must not reach every node as a restart that always fails.
func catalogHas(cat manifests.Catalog, units []string, flag string, anyUnit bool) error {
	for _, u := range units {
		if !manifests.ValidUnit(u) || anyUnit && !unitTypes[u[strings.LastIndexByte(u, '.')+1:]] {
			return fmt.Errorf("%s %q: not a systemd unit name (such as demo-web.service): %w", flag, u, ErrUnknownUnit)
		}
		if at := strings.IndexByte(u, '@'); at == 0 || at > 0 && u[at+1] == '.' {
			return fmt.Errorf("%s %s: a template (or no unit); name an instance, such as getty@tty1.service: %w", flag, u, ErrUnknownUnit)
		}
		if anyUnit || serviceOf(cat, u).Unit != "" || serviceOf(cat, templateOf(u)).Unit != "" {
			continue
		}
		msg := fmt.Sprintf("%s %s: the line's catalog has no such unit", flag, u)
		if near := nearestUnits(cat, u); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		}
		return fmt.Errorf("%s (give --allow-unknown-unit if it comes from outside the image): %w", msg, ErrUnknownUnit)
	}
	return nil
}

// templateOf returns the template unit of an instance ("getty@tty1.service"
// -> "getty@.service"), or "" for a unit that is not one.
func templateOf(u string) string {
	at, dot := strings.IndexByte(u, '@'), strings.LastIndexByte(u, '.')
	if at < 0 || dot < at {
		return ""
	}
	return u[:at+1] + u[dot:]
}

// unitTypes are the suffixes of systemd's unit types.
var unitTypes = map[string]bool{"service": true, "socket": true, "target": true, "timer": true, "mount": true, "automount": true,
	"path": true, "slice": true, "scope": true, "swap": true, "device": true}

// nearestUnits returns the catalog's units closest to u by edit distance
// (at most 3 edits), closest first, at most two.
func nearestUnits(cat manifests.Catalog, u string) []string {
	units := make([]string, 0, len(cat.Services))
	for _, s := range cat.Services {
		units = append(units, s.Unit)
	}
	return suggest.Nearest(u, units, 3, 2)
}

// CheckUnits refuses, with ErrUnknownUnit, a unit the node's catalog does
// not have; it changes nothing (restart --repair checks before it
// repairs).
func (h *Node) CheckUnits(units []string) error {
	v, err := loadView(h.state())
	if err != nil {
		return err
	}
	return knownUnits(v.catalog(), units)
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
	v, err := loadView(n)
	if err != nil {
		return nil, err
	}
	cat := v.catalog()
	if len(units) == 0 {
		units = Managed(cat)
	}
	rep := &RestartReport{Root: root, Units: units, Restarted: []manifests.ServiceAction{}}
	if err := knownUnits(cat, units); err != nil {
		return nil, err
	}
	var actions []manifests.ServiceAction
	for _, u := range units {
		actions = append(actions, manifests.ServiceAction{Unit: u, Action: manifests.ActionRestart, Because: []string{"strata restart"}})
	}
	res, runErr := runPlan(ctx, r, RestartPlan{Actions: actions, Catalog: cat}, func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		if a.Unit != "" {
			rep.Restarted = append(rep.Restarted, a)
		}
	})
	rep.Live = res
	done := rep.Restarted
	if runErr != nil {
		done = nil
	}
	if err := recordRestarts(n, v.ledger, done, rebootDue(res)); err != nil {
		return rep, err
	}
	return rep, runErr
}
