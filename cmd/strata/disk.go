package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay/offline"
	"github.com/strata-dev/strata/schema"
)

// childExit is the exit code of this command run again in a private
// mount namespace (--disk), which printed its own output and errors.
type childExit struct{ code int }

func (e childExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// inPrivateMounts makes sure a --disk command runs in a mount namespace
// of its own: in this process when it is one already (ran is false),
// otherwise by running the same command line again in one and returning
// its exit status as a childExit (ran is true).
func inPrivateMounts(c *cobra.Command, positional []string) (ran bool, err error) {
	if disk.InPrivateNamespace() {
		return false, nil
	}
	argv := strings.Fields(c.CommandPath())[1:]
	c.Flags().Visit(func(f *pflag.Flag) {
		argv = append(argv, "--"+f.Name+"="+f.Value.String())
	})
	argv = append(append(argv, "--"), positional...)
	code, err := disk.Reexec(c.Context(), argv, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
	if err != nil {
		return true, err
	}
	return true, childExit{code}
}

// applyDisk is apply-overlay --disk.
func applyDisk(c *cobra.Command, g *globals, diskPath string, src node.Source, o node.ApplyOptions, no node.Options, files []string) error {
	if ran, err := inPrivateMounts(c, files); ran {
		return err
	}
	rep, err := offline.Apply(c.Context(), diskPath, src, o, no)
	if rep != nil && (err == nil || g.json) {
		_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) { printApply(w, rep) })
	}
	return err
}

// verifyDisk is verify-sequence --disk.
func verifyDisk(c *cobra.Command, diskPath string, o node.VerifyOptions) (*schema.Audit, bool, error) {
	if ran, err := inPrivateMounts(c, nil); ran {
		return nil, true, err
	}
	a, err := offline.Verify(c.Context(), diskPath, o)
	return a, false, err
}

// statusDisk is status --disk.
func statusDisk(c *cobra.Command, g *globals, diskPath string) error {
	if ran, err := inPrivateMounts(c, nil); ran {
		return err
	}
	st, err := offline.Status(c.Context(), diskPath)
	if err != nil {
		return err
	}
	return g.output(c.OutOrStdout(), st, func(w io.Writer) { printStatus(w, st) })
}

// rollbackDisk is rollback --disk.
func rollbackDisk(c *cobra.Command, g *globals, diskPath, to string, hold bool, wait time.Duration) (*node.RollbackReport, bool, error) {
	if ran, err := inPrivateMounts(c, nil); ran {
		return nil, true, err
	}
	rep, err := offline.Rollback(c.Context(), diskPath, to, hold, node.Options{LockWait: wait, Progress: g.progress()})
	return rep, false, err
}

// settleDisk is restart-pending --disk.
func settleDisk(c *cobra.Command, g *globals, diskPath string, wait time.Duration) (*node.SettleReport, bool, error) {
	if ran, err := inPrivateMounts(c, nil); ran {
		return nil, true, err
	}
	rep, err := offline.SettlePending(c.Context(), diskPath, node.Options{LockWait: wait, Progress: g.progress()})
	return rep, false, err
}
