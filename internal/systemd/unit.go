package systemd

import (
	"context"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Unit is a snapshot of one unit loaded in the service manager: the
// properties of `systemctl show` that Resolve needs.
type Unit struct {
	// ID is the unit's primary name (systemd's Id property).
	ID string `json:"id"`
	// Names are all names of the unit: the ID and its aliases.
	Names []string `json:"names,omitempty"`
	// LoadState is "loaded", "not-found", "masked", "error", ...
	LoadState string `json:"load_state"`
	// ActiveState is "active", "reloading", "inactive", "failed",
	// "activating" or "deactivating".
	ActiveState string `json:"active_state"`
	// SubState is the type-specific state, for example "running" or
	// "exited".
	SubState string `json:"sub_state"`
	// Type is the service type ("simple", "oneshot", ...); empty for
	// units that are not services.
	Type string `json:"type,omitempty"`
	// MainPID is the service's main process, 0 if none.
	MainPID int `json:"main_pid,omitempty"`
	// RefuseManualStart and RefuseManualStop are set when the unit may
	// only be started or stopped as a dependency.
	RefuseManualStart bool `json:"refuse_manual_start,omitempty"`
	RefuseManualStop  bool `json:"refuse_manual_stop,omitempty"`
	// CanReload reports whether the unit has a reload operation.
	CanReload bool `json:"can_reload,omitempty"`
	// UnitFileState is "enabled", "static", "disabled", ... (empty for
	// units without a unit file).
	UnitFileState string `json:"unit_file_state,omitempty"`
	// InvocationID is the id of the unit's current run (empty when it
	// has not run since the manager started).
	InvocationID string `json:"invocation_id,omitempty"`
	// StateChangeMonotonic is when the unit last changed its active
	// state (entered "active" after a start or a reload, for one that
	// runs), in microseconds of CLOCK_MONOTONIC; 0 when never.
	StateChangeMonotonic uint64 `json:"state_change_monotonic,omitempty"`
}

// StateChange is StateChangeMonotonic on this host's wall clock (zero
// when never): the monotonic clock does not move with the wall clock, and
// it is the one the service manager's timestamps share with this process.
func (u Unit) StateChange() time.Time {
	if u.StateChangeMonotonic == 0 {
		return time.Time{}
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}
	}
	ago := time.Duration(ts.Nano()/1000-int64(u.StateChangeMonotonic)) * time.Microsecond
	return time.Now().Add(-ago)
}

// Manager is what Resolve's callers need of a live service manager: a
// snapshot of its loaded units.
type Manager interface {
	// Units returns every unit the manager has loaded, active or not.
	Units(ctx context.Context) ([]Unit, error)
}

// Controller is what Run needs of a live service manager: one operation
// at a time. unit is empty for VerbDaemonReexec and VerbDaemonReload.
type Controller interface {
	Do(ctx context.Context, verb Verb, unit string) error
}

// Verb is an operation Run asks of the service manager; its value is the
// systemctl command.
type Verb string

// The verbs of a resolved plan.
const (
	// VerbDaemonReexec re-executes the manager (PID 1) in place.
	VerbDaemonReexec Verb = "daemon-reexec"
	// VerbDaemonReload makes the manager re-read unit files.
	VerbDaemonReload Verb = "daemon-reload"
	// VerbTryRestart restarts a unit if it is active, and does nothing
	// otherwise.
	VerbTryRestart Verb = "try-restart"
	// VerbTryReloadOrRestart reloads an active unit, or restarts it if it
	// cannot reload, and does nothing to an inactive unit.
	VerbTryReloadOrRestart Verb = "try-reload-or-restart"
	// VerbStop stops a unit.
	VerbStop Verb = "stop"
	// VerbRestart restarts a unit whatever its state (starting a stopped
	// one). Resolve never plans it; TakeBack does, for units a change
	// already acted on.
	VerbRestart Verb = "restart"
	// VerbReloadOrRestart reloads a unit, restarting it if it cannot
	// reload or is not running.
	VerbReloadOrRestart Verb = "reload-or-restart"
	// VerbResetFailed clears a unit's failed state and start limit. Run
	// issues it before each VerbRestart (a failed unit that hit its start
	// limit refuses a restart until then); it is never a plan's step.
	VerbResetFailed Verb = "reset-failed"
)

// Active reports whether u is active or reloading: the states in which
// systemd's try-restart acts.
func (u Unit) Active() bool {
	return u.ActiveState == "active" || u.ActiveState == "reloading"
}

// Running reports whether u has a process that could hold old files
// mapped: a main process, or for a service a sub-state other than
// "exited" (a oneshot with RemainAfterExit=yes) and "dead".
func (u Unit) Running() bool {
	if u.MainPID > 0 {
		return true
	}
	return strings.HasSuffix(u.ID, ".service") && u.Active() && u.SubState != "exited" && u.SubState != "dead" && u.Type != "oneshot"
}

// HasName reports whether name is the unit's ID or one of its aliases.
func (u Unit) HasName(name string) bool {
	if u.ID == name {
		return true
	}
	for _, n := range u.Names {
		if n == name {
			return true
		}
	}
	return false
}

// Template returns the template of an instance name, for example
// "getty@.service" for "getty@tty1.service", and whether name is an
// instance. IsTemplate tells templates themselves.
func Template(name string) (string, bool) {
	at := strings.IndexByte(name, '@')
	dot := strings.LastIndexByte(name, '.')
	if at <= 0 || dot <= at+1 {
		return "", false
	}
	return name[:at+1] + name[dot:], true
}

// IsTemplate reports whether name is a template such as "getty@.service".
func IsTemplate(name string) bool {
	at := strings.IndexByte(name, '@')
	return at > 0 && at+1 < len(name) && name[at+1] == '.' && strings.LastIndexByte(name, '.') == at+1
}

// snapshot indexes units by every name and templates by their instances.
type snapshot struct {
	byName    map[string]*Unit
	instances map[string][]*Unit
}

func newSnapshot(units []Unit) snapshot {
	s := snapshot{byName: map[string]*Unit{}, instances: map[string][]*Unit{}}
	for i := range units {
		u := &units[i]
		if u.ID == "" {
			continue
		}
		// The ID wins over an alias of another unit claiming the name.
		s.byName[u.ID] = u
		if t, ok := Template(u.ID); ok {
			s.instances[t] = append(s.instances[t], u)
		}
	}
	for i := range units {
		u := &units[i]
		for _, n := range u.Names {
			if _, taken := s.byName[n]; !taken && u.ID != "" {
				s.byName[n] = u
			}
		}
	}
	for _, list := range s.instances {
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	}
	return s
}
