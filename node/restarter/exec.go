package restarter

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
	"github.com/strata-dev/strata/node"
)

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

var _ node.Restarter = Exec{}

// Resolve returns nil: the template runs the plan as recorded.
func (Exec) Resolve(context.Context, node.RestartPlan) (*systemd.Resolved, error) { return nil, nil }

// Run runs the template once with action daemon-reload if any action asks
// for it, then once per action, in order, each bounded by restartTimeout.
func (e Exec) Run(ctx context.Context, plan node.RestartPlan, _ *systemd.Resolved, report func(manifests.ServiceAction)) error {
	for _, a := range plan.Actions {
		if a.DaemonReload {
			ctx, cancel := context.WithTimeout(ctx, restartTimeout)
			err := e.run(ctx, "", manifests.ActionDaemonReload)
			cancel()
			if err != nil {
				return fmt.Errorf("%w: daemon-reload: %v", node.ErrRestart, err)
			}
			report(manifests.ServiceAction{Action: manifests.ActionDaemonReload})
			break
		}
	}
	for _, a := range plan.Actions {
		actx, cancel := context.WithTimeout(ctx, restartTimeout)
		err := e.act(actx, a.Unit, a.Action)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %s %s: %v", node.ErrRestart, a.Action, a.Unit, err)
		}
		report(a)
	}
	return nil
}

// Undo runs the plan again: the units take the old tree as they took the
// new one.
func (e Exec) Undo(ctx context.Context, plan node.RestartPlan, _ *systemd.Resolved, _ int, report func(manifests.ServiceAction)) error {
	return e.Run(ctx, plan, nil, report)
}

// act runs the template for one unit.
func (e Exec) act(ctx context.Context, unit string, action manifests.Action) error {
	if !manifests.ValidUnit(unit) {
		return fmt.Errorf("%w: %q is not a unit name", node.ErrRestart, unit)
	}
	switch action {
	case manifests.ActionRestart, manifests.ActionReload, manifests.ActionStop:
	default:
		return fmt.Errorf("%w: %s %s: unknown action", node.ErrRestart, action, unit)
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
