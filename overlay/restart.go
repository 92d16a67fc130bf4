package overlay

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// Restarter carries out restart plans on the node's service manager.
type Restarter interface {
	// DaemonReload makes the service manager re-read unit files.
	DaemonReload(ctx context.Context) error
	// Act restarts or reloads one unit.
	Act(ctx context.Context, unit string, action manifests.Action) error
}

// Systemd drives the host's systemd through systemctl.
type Systemd struct{}

var _ Restarter = Systemd{}

// DaemonReload runs `systemctl daemon-reload`.
func (Systemd) DaemonReload(ctx context.Context) error {
	return run(ctx, "systemctl", "daemon-reload")
}

// Act runs `systemctl restart|reload UNIT`.
func (Systemd) Act(ctx context.Context, unit string, action manifests.Action) error {
	return run(ctx, "systemctl", string(action), unit)
}

// Exec runs a command template per action through /bin/sh: "{unit}" and
// "{action}" are replaced by the shell-quoted unit and action. For
// daemon-reload, {unit} is empty.
type Exec struct {
	Template string
}

var _ Restarter = Exec{}

// DaemonReload runs the template with action daemon-reload.
func (e Exec) DaemonReload(ctx context.Context) error {
	return e.Act(ctx, "", manifests.ActionDaemonReload)
}

// Act runs the template for one unit.
func (e Exec) Act(ctx context.Context, unit string, action manifests.Action) error {
	cmd := strings.NewReplacer("{unit}", shellQuote(unit), "{action}", shellQuote(string(action))).Replace(e.Template)
	return run(ctx, "/bin/sh", "-c", cmd)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second // a killed command's children may hold its output open
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// restartTimeout bounds each restart action, so a hung service manager or
// command cannot hold the node lock forever.
const restartTimeout = 5 * time.Minute

// runPlan carries out actions: one daemon-reload first if any unit file
// changed, then each unit once, in order. It stops at the first failure.
func runPlan(ctx context.Context, r Restarter, actions []manifests.ServiceAction, report func(manifests.ServiceAction)) error {
	for _, a := range actions {
		if a.DaemonReload {
			ctx, cancel := context.WithTimeout(ctx, restartTimeout)
			err := r.DaemonReload(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%w: daemon-reload: %v", ErrRestart, err)
			}
			report(manifests.ServiceAction{Action: manifests.ActionDaemonReload})
			break
		}
	}
	for _, a := range actions {
		actx, cancel := context.WithTimeout(ctx, restartTimeout)
		err := r.Act(actx, a.Unit, a.Action)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %s %s: %v", ErrRestart, a.Action, a.Unit, err)
		}
		report(a)
	}
	return nil
}
