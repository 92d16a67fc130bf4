package overlay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
)

// Restarter carries out restart plans on the node's service manager.
type Restarter interface {
	// DaemonReload makes the service manager re-read unit files.
	DaemonReload(ctx context.Context) error
	// Act restarts or reloads one unit.
	Act(ctx context.Context, unit string, action manifests.Action) error
}

// Exec runs a command template per action through /bin/sh. "{unit}" and
// "{action}" stand for the unit and the action; for daemon-reload the unit
// is empty. The values never pass through the shell's parser: each
// placeholder becomes a double-quoted expansion of a variable
// ("${STRATA_UNIT}", "${STRATA_ACTION}") set in the command's environment,
// so whatever quoting the template puts around a placeholder, a value
// cannot run as a command. Units are checked as unit names first.
type Exec struct {
	Template string
}

var _ Restarter = Exec{}

// DaemonReload runs the template with action daemon-reload.
func (e Exec) DaemonReload(ctx context.Context) error {
	return e.run(ctx, "", manifests.ActionDaemonReload)
}

// Act runs the template for one unit.
func (e Exec) Act(ctx context.Context, unit string, action manifests.Action) error {
	if !manifests.ValidUnit(unit) {
		return fmt.Errorf("%w: %q is not a unit name", ErrRestart, unit)
	}
	switch action {
	case manifests.ActionRestart, manifests.ActionReload, manifests.ActionStop:
	default:
		return fmt.Errorf("%w: %s %s: unknown action", ErrRestart, action, unit)
	}
	return e.run(ctx, unit, action)
}

// run runs the template with unit and action in its environment.
func (e Exec) run(ctx context.Context, unit string, action manifests.Action) error {
	script := strings.NewReplacer("{unit}", `"${STRATA_UNIT}"`, "{action}", `"${STRATA_ACTION}"`).Replace(e.Template)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "STRATA_UNIT="+unit, "STRATA_ACTION="+string(action))
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second // a killed command's children may hold its output open
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("%s %s (unit %q): %w: %s", action, e.Template, unit, err, msg)
		}
		return fmt.Errorf("%s %s (unit %q): %w", action, e.Template, unit, err)
	}
	return nil
}

// restartTimeout bounds each restart action, so a hung service manager or
// command cannot hold the node lock forever.
const restartTimeout = 5 * time.Minute

// planRequest is a restart plan and what resolving it on a live node
// needs: the catalog in effect and the paths the change touched.
type planRequest struct {
	actions []manifests.ServiceAction
	catalog manifests.Catalog
	changed []string
}

// runPlan carries out a plan. The Systemd restarter resolves it against
// the running manager first and returns that resolution; others carry it
// out as recorded: one daemon-reload first if any unit file changed, then
// each unit once, in order. It stops at the first failure.
func runPlan(ctx context.Context, r Restarter, req planRequest, report func(manifests.ServiceAction)) (*systemd.Resolved, error) {
	if s, ok := r.(Systemd); ok {
		res, err := s.resolve(ctx, req)
		if err != nil {
			return nil, err
		}
		return res, s.run(ctx, res, req.catalog, report)
	}
	for _, a := range req.actions {
		if a.DaemonReload {
			ctx, cancel := context.WithTimeout(ctx, restartTimeout)
			err := r.DaemonReload(ctx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%w: daemon-reload: %v", ErrRestart, err)
			}
			report(manifests.ServiceAction{Action: manifests.ActionDaemonReload})
			break
		}
	}
	for _, a := range req.actions {
		actx, cancel := context.WithTimeout(ctx, restartTimeout)
		err := r.Act(actx, a.Unit, a.Action)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrRestart, a.Action, a.Unit, err)
		}
		report(a)
	}
	return nil, nil
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
