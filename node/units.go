package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/configset"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// Observer is what a node's service manager tells of its units, and runs
// against the node's tree as it is: restarter.Systemd is one. Without
// one, a node knows what its units loaded only from strata's own records
// of its restarts and reloads.
type Observer interface {
	// Observe returns the units' runs (a unit the manager does not know
	// is left out).
	Observe(ctx context.Context, units []string) (map[string]UnitRun, error)
	// ValidateOnDisk runs a service's validation command (argv) against
	// the node's tree as it is on disk, in the sandbox, returning its
	// output.
	ValidateOnDisk(ctx context.Context, argv []string) (string, error)
}

// UnitRun is a unit's current run as the service manager has it.
type UnitRun struct {
	// Active is its ActiveState ("active", "reloading", "failed", ...).
	Active string
	// InvocationID is the id of its current run.
	InvocationID string
	// Since is when it last entered its state: for an active unit, when
	// it finished starting or last reloading.
	Since time.Time
}

// running reports whether a run has a config loaded.
func (r UnitRun) running() bool {
	return r.Active == "active" || r.Active == "reloading" || r.Active == "deactivating"
}

// observer is the node's observer: Options.Observer, else its restarter
// when that is one.
func (h *Node) observer() Observer {
	if h.o.Observer != nil {
		return h.o.Observer
	}
	if o, ok := h.o.Restarter.(Observer); ok && !h.o.Offline {
		return o
	}
	return nil
}

// unitConfigs reads what each managed unit of the node at v loaded and
// what its config is on disk and at the head (Status.Units). owed names
// the units with a restart or reload owed, and why.
func (h *Node) unitConfigs(ctx context.Context, v *view.View, owed map[string]string) ([]schema.UnitConfig, error) {
	n := h.b.Node()
	cat := v.Catalog()
	claims := configset.Claims(cat)
	expected, err := v.Expected()
	if err != nil {
		return nil, err
	}
	disk, derrs, err := configset.Disk(ctx, h.root, claims)
	if err != nil {
		return nil, err
	}
	rec, err := n.Loaded()
	if err != nil {
		return nil, err
	}
	units := make([]string, 0, len(claims))
	for u := range claims {
		units = append(units, u)
	}
	sort.Strings(units)
	obs := h.observer()
	var runs map[string]UnitRun
	if obs != nil {
		var plain []string
		for _, u := range units {
			if !strings.Contains(u, "@.") {
				plain = append(plain, u)
			}
		}
		if runs, err = obs.Observe(ctx, plain); err != nil {
			return nil, fmt.Errorf("asking the service manager about %s's units: %w", h.root, err)
		}
	}
	presumed := lastChange(v.Ledger)
	out := make([]schema.UnitConfig, 0, len(units))
	for _, u := range units {
		uc := schema.UnitConfig{Unit: u, Head: configset.Head(claims[u], expected).Digest()}
		if err := derrs[u]; err != nil {
			uc.State, uc.Error = schema.UnitError, err.Error()
			uc.Note = "its config could not be read: " + err.Error()
			out = append(out, uc)
			continue
		}
		head := configset.Head(claims[u], expected)
		d := disk[u]
		uc.Disk = d.Set.Digest()
		uc.Drift = d.Set.Differ(head)
		run, seen := runs[u]
		r, recorded := rec.Units[u]
		if seen {
			uc.Active, uc.InvocationID = run.Active, run.InvocationID
		}
		switch {
		case seen && !run.running():
			// Nothing loaded: it takes the config on disk when it starts.
		case recorded && (!seen || stands(r, run)):
			at, _ := time.Parse(time.RFC3339Nano, r.At)
			uc.Loaded, uc.LoadedAt, uc.LoadedBy = r.Files.Digest(), at, r.By
			if r.InvocationID != "" {
				uc.InvocationID = r.InvocationID
			}
			uc.Differ = d.Set.Differ(r.Files)
		default:
			// Loaded outside strata's records: at the manager's start or
			// reload time, else presumed at the node's last change. What
			// changed since is what it has not loaded.
			uc.LoadedAt, uc.LoadedBy = presumed, "presumed"
			if seen {
				uc.LoadedAt, uc.LoadedBy = run.Since, "systemd"
			}
			if uc.Differ = d.ChangedAfter(uc.LoadedAt); len(uc.Differ) == 0 {
				uc.Loaded = uc.Disk
			}
		}
		h.judgeUnit(ctx, &uc, cat, v.Head().Digest, seen && !run.running(), owed[u], obs)
		out = append(out, uc)
	}
	return out, nil
}

// stands reports whether strata's record of a unit's load is still what
// the unit runs: the same run, not reloaded or restarted since.
func stands(r manifests.LoadedUnit, run UnitRun) bool {
	at, err := time.Parse(time.RFC3339Nano, r.At)
	if err != nil {
		return false
	}
	if r.InvocationID != "" && run.InvocationID != "" && r.InvocationID != run.InvocationID {
		return false
	}
	return !run.Since.After(at)
}

// lastChange is when strata last changed the node's tree, rounded up to
// the second (ledger times are in seconds): a unit with no record of a
// load and no service manager to ask is presumed to have loaded what was
// on disk then.
func lastChange(l *manifests.Ledger) time.Time {
	var last time.Time
	for _, e := range l.Entries {
		switch e.Action {
		case manifests.LedgerRestart, manifests.LedgerFailed:
			continue
		}
		if t, err := time.Parse(time.RFC3339, e.Time); err == nil && t.After(last) {
			last = t
		}
	}
	return last.Add(time.Second)
}

// judgeUnit sets a unit's state and note from what it loaded, what is on
// disk and the head (head: the node's head digest), and owed (why a
// restart is owed, "" if none). A config on disk that is not the head's
// is validated whenever the unit does not run it yet: loaded before it
// changed, stopped, or failed.
func (h *Node) judgeUnit(ctx context.Context, uc *schema.UnitConfig, cat manifests.Catalog, head string, stopped bool, owed string, obs Observer) {
	failed := uc.Active == "failed"
	stale := !stopped && !failed && (uc.Loaded == "" || len(uc.Differ) > 0)
	files := strings.Join(clipList(uc.Differ, 5), ", ")
	drift := strings.Join(clipList(uc.Drift, 5), ", ")
	var why string
	var bad error
	if len(uc.Drift) > 0 && (stale || stopped || failed) {
		why, bad = h.validateOnDisk(ctx, cat, uc, head, obs)
	}
	switch {
	case bad != nil:
		uc.State = schema.UnitBad
		uc.Note = fmt.Sprintf("config on disk is bad: %s; nothing restarts onto it: fix %s, or strata restart --repair --root %s returns it to the head", bad, drift, h.root)
	case failed:
		uc.State = schema.UnitFailed
		uc.Note = fmt.Sprintf("%s has failed; see journalctl -u %s, then strata restart --root %s --unit %s", uc.Unit, uc.Unit, h.root, uc.Unit)
	case stale && len(uc.Drift) == 0:
		uc.State = schema.UnitChanged
		uc.Note = fmt.Sprintf("config changed on disk (%s), restart or reload pending: strata restart --root %s --unit %s", files, h.root, uc.Unit)
	case stale:
		uc.State = schema.UnitChanged
		uc.Note = fmt.Sprintf("config changed on disk (%s: a local edit, not the head's; %s), restart or reload pending: publish it (strata config set), or strata restart --repair --root %s returns it to the head", files, why, h.root)
	case stopped && len(uc.Drift) > 0:
		uc.State = schema.UnitLocalEdit
		uc.Note = fmt.Sprintf("not running; its config on disk is a local edit of %s, not the head's (%s), which it takes when it starts: publish it (strata config set), or strata restart --repair --root %s returns it to the head", drift, why, h.root)
	case len(uc.Drift) > 0:
		uc.State = schema.UnitLocalEdit
		uc.Note = fmt.Sprintf("runs a local edit of %s, not the head's config: publish it (strata config set), or strata restart --repair --root %s returns it to the head", drift, h.root)
	case owed != "":
		uc.State = schema.UnitOwed
		uc.Note = owed
	default:
		uc.State = schema.UnitCurrent
	}
}

// clipList returns the first n of ss, with "and K more" for the rest.
func clipList(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(append([]string{}, ss[:n]...), fmt.Sprintf("and %d more", len(ss)-n))
}

// validateOnDisk runs the unit's validation command against the node's
// tree as it is on disk, once per config on disk and head (the verdict
// is kept by both digests). It returns how it was judged ("it
// validates", "not validated: ...") and, when the command ran and
// refused (a non-zero exit), the refusal. A command that could not run
// or finish (no sandbox, a time limit, a cancelled request) is not a
// verdict: it is said, not kept, and never makes the config bad.
func (h *Node) validateOnDisk(ctx context.Context, cat manifests.Catalog, uc *schema.UnitConfig, head string, obs Observer) (string, error) {
	argv := catalog.ServiceOf(cat, uc.Unit).Validate
	if len(argv) == 0 {
		return "its service declares no validation", nil
	}
	if obs == nil {
		return "not validated: no service manager here to run it in", nil
	}
	key := validationKey{root: h.root, unit: uc.Unit, disk: uc.Disk, head: head, argv: strings.Join(argv, "\x00")}
	if err, ok := validations.get(key); ok {
		return "it validates", err
	}
	vctx, cancel := context.WithTimeout(ctx, validationTimeout)
	out, err := obs.ValidateOnDisk(vctx, argv)
	ranOut := vctx.Err() != nil // a limit or a cancellation, not the command's verdict
	cancel()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && !ranOut:
		err = fmt.Errorf("%s does not validate: %s", uc.Unit, catalog.Outcome(argv, err, out))
	default:
		return fmt.Sprintf("not validated: %s: %v", strings.Join(argv, " "), err), nil
	}
	validations.put(key, err)
	return "it validates", err
}

// owedUnits maps each unit a status owes a restart or reload (pending,
// deferred to a reboot, or failed) to a note saying so.
func owedUnits(st *Status) map[string]string {
	out := map[string]string{}
	for _, a := range st.Pending {
		out[a.Unit] = fmt.Sprintf("a %s is owed (restart debt: %s); strata restart --root %s --unit %s settles it", a.Action, strings.Join(a.Because, ", "), st.Root, a.Unit)
	}
	for _, a := range st.Reboot {
		out[a.Unit] = fmt.Sprintf("takes its change at the next boot (%s)", strings.Join(a.Because, ", "))
	}
	if f := st.LastFailure; f != nil {
		for _, l := range [][]manifests.ServiceAction{f.Pending, f.Done} {
			for _, a := range l {
				out[a.Unit] = fmt.Sprintf("the last restart failed at %s: %s; fix the unit, then strata restart --root %s --unit %s", f.Time, f.Error, st.Root, a.Unit)
			}
		}
	}
	return out
}

// ConfigDigest is the digest of a node's config on disk: one SHA-256
// over its units' disk digests in unit order.
func ConfigDigest(units []schema.UnitConfig) string {
	set := manifests.ConfigSet{}
	for _, u := range units {
		set[u.Unit] = strings.TrimPrefix(u.Disk, manifests.DigestPrefix)
	}
	return set.Digest()
}
