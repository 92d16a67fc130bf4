package restarter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

// Systemd drives the node's own systemd. A plan is resolved against the
// running manager before anything is done (package internal/systemd):
// only active units act (try-restart, try-reload-or-restart), templates
// become their running instances, aliases act once, PID 1 re-executes
// when its own files change, and units that cannot restart safely are
// deferred to the next boot. Then the units that acted must be healthy.
type Systemd struct {
	// Command is the systemctl argv (default: systemctl), for example an
	// nsenter prefix to reach a node's systemd from outside.
	Command []string
	// Settle is how long restarted units get before the health check
	// (zero: DefaultSettle).
	Settle time.Duration
	// Root is the node's root directory: services' check commands run
	// in a sandbox rooted there, so they are the node's programs seeing
	// the node's files, not the host's ("" or "/": the running system
	// itself).
	Root string
}

// DefaultSettle is how long restarted units get before the health check.
const DefaultSettle = 2 * time.Second

// checkTimeout bounds a service's health-check command.
const checkTimeout = time.Minute

var _ node.Restarter = Systemd{}

func (s Systemd) ctl() *systemd.Systemctl {
	if len(s.Command) > 0 {
		return systemd.NewSystemctl(systemd.WithCommand(s.Command...))
	}
	return systemd.NewSystemctl()
}

// Resolve decides what the plan means on the running system.
func (s Systemd) Resolve(ctx context.Context, plan node.RestartPlan) (*systemd.Resolved, error) {
	units, err := s.ctl().Units(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the running units: %w", node.ErrRestart, err)
	}
	r := systemd.Resolve(systemd.Request{Actions: plan.Actions, Catalog: plan.Catalog, Changed: plan.Changed, RestartFailed: plan.RestartFailed}, units)
	return &r, nil
}

// Run carries out a resolved plan (res nil: resolved first) and checks the
// health of what acted.
func (s Systemd) Run(ctx context.Context, plan node.RestartPlan, res *systemd.Resolved, report func(manifests.ServiceAction)) error {
	if res == nil {
		var err error
		if res, err = s.Resolve(ctx, plan); err != nil {
			return err
		}
	}
	ctl := s.ctl()
	err := systemd.Run(ctx, ctl, *res, func(st systemd.Step) {
		report(manifests.ServiceAction{Unit: st.Unit, Action: manifests.Action(st.Action), Because: st.Because})
	}, systemd.WithStepTimeout(restartTimeout))
	if err != nil {
		return fmt.Errorf("%w: %w", node.ErrRestart, err)
	}
	return s.health(ctx, ctl, res, plan.Catalog)
}

// Undo returns the units a failed forward run (fwd, of which reached
// unit steps were tried) acted on to the old tree: restarted whatever
// their state, then checked like any restart. With no forward run it
// runs the plan afresh.
func (s Systemd) Undo(ctx context.Context, plan node.RestartPlan, fwd *systemd.Resolved, reached int, report func(manifests.ServiceAction)) error {
	if fwd == nil {
		return s.Run(ctx, plan, nil, report)
	}
	back := systemd.TakeBack(*fwd, reached)
	return s.Run(ctx, plan, &back, report)
}

// health waits for the units that acted to settle, then requires each to
// be active and its declared check command to succeed.
func (s Systemd) health(ctx context.Context, ctl *systemd.Systemctl, res *systemd.Resolved, cat manifests.Catalog) error {
	var units []string
	from := map[string]string{}
	for _, st := range res.Steps {
		if st.Action != systemd.VerbStop {
			units = append(units, st.Unit)
			from[st.Unit] = st.From
		}
	}
	if len(units) == 0 {
		return nil
	}
	settle := s.Settle
	if settle == 0 {
		settle = DefaultSettle
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	shown, err := ctl.Show(ctx, units...)
	if err != nil {
		return fmt.Errorf("%w: health check: %w", node.ErrRestart, err)
	}
	for _, u := range shown {
		if u.ActiveState != "active" {
			return fmt.Errorf("%w: health check: %s is %s (%s) after its restart", node.ErrRestart, u.ID, u.ActiveState, u.SubState)
		}
	}
	for _, u := range units {
		cmd := catalog.ServiceOf(cat, from[u]).Check
		if cmd == nil {
			continue
		}
		if out, err := runCommand(ctx, cmd, checkTimeout, s.Root); err != nil {
			return fmt.Errorf("%w: health check of %s: %s: %w: %s", node.ErrRestart, u, strings.Join(cmd, " "), err, out)
		}
	}
	return nil
}

// runCommand runs a declared command (argv, never a shell) with a time
// limit in a sandbox whose root is the node's (package internal/sandbox:
// unprivileged, a copy-on-write view of the tree, the node's network, so
// a check can reach its service), and returns its output, bounded.
func runCommand(ctx context.Context, argv []string, limit time.Duration, root string) (string, error) {
	if err := manifests.ValidCommand(argv); err != nil {
		return "", err
	}
	if root == "" {
		root = "/"
	}
	return sandbox.Run(ctx, sandbox.Spec{Root: root, Argv: argv, Timeout: limit, Network: true, FileCaps: true})
}

var _ node.Observer = Systemd{}

// Observe asks the service manager about units: their active state, the
// id of their current run and when they last entered that state. A unit
// the manager has not loaded is left out.
func (s Systemd) Observe(ctx context.Context, units []string) (map[string]node.UnitRun, error) {
	out := map[string]node.UnitRun{}
	if len(units) == 0 {
		return out, nil
	}
	shown, err := s.ctl().Show(ctx, units...)
	if err != nil {
		return nil, err
	}
	for _, u := range shown {
		if u.LoadState != "loaded" {
			continue
		}
		for _, name := range units {
			if u.HasName(name) {
				out[name] = node.UnitRun{Active: u.ActiveState, InvocationID: u.InvocationID, Since: u.StateChange()}
			}
		}
	}
	return out, nil
}

// ValidateOnDisk runs a service's validation command against the node's
// tree as it is, in the sandbox (no network; writes go to a scratch
// layer that is thrown away).
func (s Systemd) ValidateOnDisk(ctx context.Context, argv []string) (string, error) {
	if err := manifests.ValidCommand(argv); err != nil {
		return "", err
	}
	root := s.Root
	if root == "" {
		root = "/"
	}
	return sandbox.Run(ctx, sandbox.Spec{Root: root, Argv: argv, FileCaps: true, Timeout: checkTimeout})
}
