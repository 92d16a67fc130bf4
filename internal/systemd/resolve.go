package systemd

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/strata-dev/strata/manifests"
)

// Request is what Resolve fits to the running system: a recorded restart
// plan and what it was computed from.
type Request struct {
	// Actions is the restart plan (see catalog.Plan and overlay's plan).
	Actions []manifests.ServiceAction `json:"actions"`
	// Catalog is the service catalog in effect; it tells whether a cause
	// is a unit file, a declared path, a binary or a library.
	Catalog manifests.Catalog `json:"-"`
	// Changed are the tree paths (relative, no leading slash) the change
	// adds, modifies or deletes.
	Changed []string `json:"changed,omitempty"`
	// ManagerFiles are path.Match patterns of the tree paths of the
	// service manager's program and libraries; a changed path matching
	// one means daemon-reexec. Nil means DefaultManagerFiles. The exact
	// list is the caller's to derive (the catalog's ELF resolver applied
	// to lib/systemd/systemd gives the full DT_NEEDED closure); the
	// defaults cover the program, libsystemd-core/-shared, libc and the
	// dynamic loader.
	ManagerFiles []string `json:"-"`
	// NeverRestart are patterns of units never acted on live; nil means
	// DefaultNeverRestart.
	NeverRestart []*regexp.Regexp `json:"-"`
	// RestartFailed restarts units the manager has failed (restart, not
	// try-restart, which does nothing to them): an operator's explicit
	// restart of a unit whose last restart failed must be able to bring
	// it back and settle its debt. A plan's restarts never start a unit
	// that is not running.
	RestartFailed bool `json:"-"`
}

// Resolved is a restart plan fitted to the running system. Every plan
// unit is accounted for: as the From or Also of a Step or Deferred entry,
// or in Skipped (an alias merged into its unit's entry is both in Also and
// in Skipped with ReasonAlias).
type Resolved struct {
	// DaemonReexec is set when the manager's own program or libraries
	// changed (ReexecBecause); it implies a daemon-reload.
	DaemonReexec  bool     `json:"daemon_reexec,omitempty"`
	ReexecBecause []string `json:"reexec_because,omitempty"`
	// DaemonReload is set when a unit file changed.
	DaemonReload bool `json:"daemon_reload,omitempty"`
	// Steps are the operations on units: stops first, then restarts and
	// reloads, each in unit order.
	Steps []Step `json:"steps"`
	// Deferred are active units a live restart must not touch; the change
	// reaches them at the next reboot.
	Deferred []Held `json:"deferred"`
	// Skipped are plan units that need nothing, sorted by unit and From.
	Skipped []Held `json:"skipped"`
}

// Step is one operation on one loaded, active unit.
type Step struct {
	// Unit is the unit's ID: a concrete unit, never a template or alias.
	Unit   string `json:"unit,omitempty"`
	Action Verb   `json:"action"`
	// From is the plan unit the step came from (a template, an alias or
	// the ID itself); Also are further plan names merged into it.
	From string   `json:"from,omitempty"`
	Also []string `json:"also,omitempty"`
	// Because are the changed paths behind the step.
	Because []string `json:"because,omitempty"`
}

// Held is a plan unit Resolve does not act on, and why.
type Held struct {
	// Unit is the unit's ID when it is loaded, otherwise the plan name.
	Unit   string           `json:"unit"`
	From   string           `json:"from,omitempty"`
	Action manifests.Action `json:"action"`
	Reason Reason           `json:"reason"`
	// Detail says more, for people: a state, a pattern, an alias.
	Detail  string   `json:"detail,omitempty"`
	Because []string `json:"because,omitempty"`
}

// Reason classifies a Held entry.
type Reason string

// Reasons for Skipped entries.
const (
	ReasonInvalidName Reason = "invalid-name" // not a valid unit name
	ReasonNotLoaded   Reason = "not-loaded"   // no loaded unit has the name
	ReasonNoInstances Reason = "no-instances" // a template with no loaded instance
	ReasonInactive    Reason = "inactive"     // not active: try-restart would do nothing
	ReasonNoProcess   Reason = "no-process"   // only binaries or libraries changed and nothing runs them
	ReasonAlias       Reason = "alias"        // merged into the step or entry of the unit's ID
	ReasonAliasStop   Reason = "alias-stop"   // removing an alias does not stop the unit
)

// Reasons for Deferred entries: each means "reboot required".
const (
	ReasonNeverRestart Reason = "never-restart" // matches a never-restart pattern
	ReasonRefuseManual Reason = "refuse-manual" // RefuseManualStart= or RefuseManualStop=
	ReasonUnitType     Reason = "unit-type"     // not a .service
	ReasonLoadState    Reason = "load-state"    // active but its definition is gone or broken
)

// group collects the plan actions that reach one loaded unit.
type group struct {
	unit    *Unit
	names   []string // plan names, in plan order
	action  manifests.Action
	because []string
	config  bool // a cause other than a binary or library
}

// Resolve fits req's plan to the units loaded in the manager (a snapshot
// from Manager.Units). It is a pure function; see the package
// documentation for the rules.
func Resolve(req Request, units []Unit) Resolved {
	snap := newSnapshot(units)
	never := req.NeverRestart
	if never == nil {
		never = DefaultNeverRestart()
	}
	mfiles := req.ManagerFiles
	if mfiles == nil {
		mfiles = defaultManagerFiles
	}
	svc := map[string]*manifests.Service{}
	for i := range req.Catalog.Services {
		svc[req.Catalog.Services[i].Unit] = &req.Catalog.Services[i]
	}

	res := Resolved{Steps: []Step{}, Deferred: []Held{}, Skipped: []Held{}}
	res.ReexecBecause = managerChanged(req.Changed, mfiles)
	res.DaemonReexec = len(res.ReexecBecause) > 0

	actions := append([]manifests.ServiceAction(nil), req.Actions...)
	sort.SliceStable(actions, func(i, j int) bool { return actions[i].Unit < actions[j].Unit })
	groups := map[string]*group{}
	skip := func(unit, from string, a manifests.ServiceAction, r Reason, detail string) {
		res.Skipped = append(res.Skipped, Held{Unit: unit, From: from, Action: a.Action, Reason: r, Detail: detail, Because: uniqueSorted(a.Because)})
	}
	for _, a := range actions {
		res.DaemonReload = res.DaemonReload || a.DaemonReload
		if !manifests.ValidUnit(a.Unit) {
			skip(a.Unit, "", a, ReasonInvalidName, "")
			continue
		}
		var targets []*Unit
		if IsTemplate(a.Unit) {
			targets = snap.instances[a.Unit]
			if len(targets) == 0 {
				skip(a.Unit, "", a, ReasonNoInstances, "no instance of the template is loaded")
				continue
			}
		} else if u := snap.byName[a.Unit]; u != nil {
			targets = []*Unit{u}
		} else {
			skip(a.Unit, "", a, ReasonNotLoaded, "")
			continue
		}
		for _, u := range targets {
			if a.Action == manifests.ActionStop && !IsTemplate(a.Unit) && u.ID != a.Unit {
				skip(a.Unit, "", a, ReasonAliasStop, "alias of "+u.ID)
				continue
			}
			g := groups[u.ID]
			if g == nil {
				g = &group{unit: u}
				groups[u.ID] = g
			}
			g.names = append(g.names, a.Unit)
			g.action = mergeAction(g.action, a.Action)
			g.because = append(g.because, a.Because...)
			g.config = g.config || a.DaemonReload || hasConfigCause(catalogEntry(svc, a.Unit), a.Because)
		}
	}

	ids := make([]string, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var stops, acts []Step
	for _, id := range ids {
		g := groups[id]
		from, also := primary(id, g.names)
		for _, n := range also {
			if IsTemplate(n) {
				continue // an expansion, not an alias
			}
			res.Skipped = append(res.Skipped, Held{Unit: n, From: n, Action: g.action, Reason: ReasonAlias,
				Detail: fmt.Sprintf("resolves to %s, considered once as %s", id, from)})
		}
		because := uniqueSorted(g.because)
		held := Held{Unit: id, From: from, Action: g.action, Because: because}
		names := append([]string{id}, g.names...)
		failed := req.RestartFailed && g.unit.ActiveState == "failed" && g.action != manifests.ActionStop
		if r, detail, ok := decide(g, names, never); ok && !(failed && r == ReasonInactive) {
			held.Reason, held.Detail = r, detail
			if r == ReasonNeverRestart || r == ReasonRefuseManual || r == ReasonUnitType || r == ReasonLoadState {
				res.Deferred = append(res.Deferred, held)
			} else {
				res.Skipped = append(res.Skipped, held)
			}
			continue
		}
		st := Step{Unit: id, Action: verbFor(g.action), From: from, Also: also, Because: because}
		if failed {
			st.Action = VerbRestart
		}
		if g.action == manifests.ActionStop {
			stops = append(stops, st)
		} else {
			acts = append(acts, st)
		}
	}
	res.Steps = append(append(res.Steps, stops...), acts...)
	sortHeld(res.Skipped)
	sortHeld(res.Deferred)
	return res
}

// primary picks the plan name a group is reported under: the ID itself if
// the plan names it, otherwise the first name; the others are returned
// sorted.
func primary(id string, names []string) (string, []string) {
	names = uniqueSorted(names)
	from := names[0]
	for _, n := range names {
		if n == id {
			from = n
		}
	}
	var also []string
	for _, n := range names {
		if n != from {
			also = append(also, n)
		}
	}
	return from, also
}

func sortHeld(h []Held) {
	sort.SliceStable(h, func(i, j int) bool {
		if h[i].Unit != h[j].Unit {
			return h[i].Unit < h[j].Unit
		}
		return h[i].From < h[j].From
	})
}

// TakeBack is the plan that returns the units r acted on to the tree they
// ran before: the first reached steps of r (those that ran, and the one
// that failed) restarted or reloaded whatever their state now (a unit the
// change broke is failed, and must come back on the old files), stopped
// units started again, after the same daemon-reexec or daemon-reload.
func TakeBack(r Resolved, reached int) Resolved {
	out := Resolved{DaemonReexec: r.DaemonReexec, ReexecBecause: r.ReexecBecause, DaemonReload: r.DaemonReload, Steps: []Step{}, Deferred: []Held{}, Skipped: []Held{}}
	for _, st := range r.Steps[:min(max(reached, 0), len(r.Steps))] {
		switch st.Action {
		case VerbTryReloadOrRestart:
			st.Action = VerbReloadOrRestart
		default:
			st.Action = VerbRestart
		}
		out.Steps = append(out.Steps, st)
	}
	return out
}
