package systemd

import (
	"context"
	"fmt"
	"time"
)

// DefaultStepTimeout bounds each operation of Run, so a hung service
// manager or unit cannot hold the node lock forever.
const DefaultStepTimeout = 5 * time.Minute

// RunOption configures Run.
type RunOption func(*runConfig)

type runConfig struct {
	timeout time.Duration
}

// WithStepTimeout sets the time each operation may take (default
// DefaultStepTimeout).
func WithStepTimeout(d time.Duration) RunOption {
	return func(c *runConfig) { c.timeout = d }
}

// Run carries out r through c: daemon-reexec if r.DaemonReexec, otherwise
// daemon-reload if r.DaemonReload, then each step in order. It reports
// each operation done through report (nil for none); a daemon operation
// is reported as a Step with Action VerbDaemonReexec or VerbDaemonReload
// and no Unit. It stops at the first failure with an error wrapping
// ErrAction that names the verb and unit and carries the controller's
// error (for Systemctl, systemctl's output).
func Run(ctx context.Context, c Controller, r Resolved, report func(Step), opts ...RunOption) error {
	cfg := runConfig{timeout: DefaultStepTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if report == nil {
		report = func(Step) {}
	}
	var ops []Step
	switch {
	case r.DaemonReexec:
		ops = append(ops, Step{Action: VerbDaemonReexec, Because: r.ReexecBecause})
	case r.DaemonReload:
		ops = append(ops, Step{Action: VerbDaemonReload})
	}
	ops = append(ops, r.Steps...)
	for _, st := range ops {
		sctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		if st.Action == VerbRestart {
			// A failed unit may have hit its start limit (Restart= on
			// failure); an explicit restart clears it, as an operator
			// would. Its own failure is the restart's to report.
			_ = c.Do(sctx, VerbResetFailed, st.Unit)
		}
		err := c.Do(sctx, st.Action, st.Unit)
		cancel()
		if err != nil {
			if st.Unit == "" {
				return fmt.Errorf("%w: %s: %w", ErrAction, st.Action, err)
			}
			return fmt.Errorf("%w: %s %s: %w", ErrAction, st.Action, st.Unit, err)
		}
		report(st)
	}
	return nil
}
