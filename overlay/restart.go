package overlay

import (
	"bytes"
	"context"
	"fmt"
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
