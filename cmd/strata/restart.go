package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/node"
)

func newRestartCmd(g *globals) *cobra.Command {
	var root, inventory, group, restartWith, maxUnavail, repoLoc, bundle, transfer string
	var repair bool
	var units []string
	var wait time.Duration
	var o fleet.RestartOptions
	c := &cobra.Command{
		Use:   "restart (--root DIR | --inventory INV [--group G] [--canary N] [--max-unavailable N|P%]) [--unit U ...]",
		Short: "Restart a node's managed services, or a cluster's in rolling waves",
		Long: `With --root, restart the node's managed services (those its image declares:
recipe services with paths, reload paths, a validate or a check command)
or the --unit units, which must be in the node's catalog, the way an apply
restarts what it touched: only running units restart (nothing stopped
starts), each once; then each must be active and pass its check command.
No file changes, no other unit is touched, and the restarts are recorded
in the ledger (settling any debt those units had). Exit 5 when a restart
or check fails.

With --inventory, do the same on every node of the inventory over SSH
(strata restart --root / on each), in rolling waves like rollout: the
--canary nodes first, then at most --max-unavailable nodes at a time (less
those already unreachable), each node's health checked after its
restarts. A wave in which a node failed is the last. Every node is listed:
restarted, failed, unreachable or skipped; exit 3 unless all restarted.`,
		Example: `  strata restart --root / --unit nginx.service
  strata restart --inventory fleet.yaml --group web --canary 1 --max-unavailable 1`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if (root == "") == (inventory == "") {
				return usageError{fmt.Errorf("give --root DIR or --inventory INV (not both)")}
			}
			if root != "" {
				for _, name := range []string{"group", "canary", "max-unavailable", "parallel", "health-timeout", "node-timeout", "transfer", "known-hosts", "identity", "user", "ssh-timeout", "remote-strata"} {
					if c.Flags().Changed(name) {
						return usageError{fmt.Errorf("--%s goes with --inventory, not --root", name)}
					}
				}
				r, err := restarterFor(restartWith, root)
				if err != nil {
					return err
				}
				if r == nil {
					return usageError{fmt.Errorf("no service manager to restart with: for a root other than /, give --restart-with systemd or exec:'CMD {unit} {action}'")}
				}
				n, err := node.Open(root, node.Options{Restarter: r, LockWait: wait, Progress: g.progress()})
				if err != nil {
					return err
				}
				var fixed *node.RepairReport
				if err := n.CheckUnits(units); errors.Is(err, node.ErrUnknownUnit) {
					return usageError{fmt.Errorf("--unit: %w", err)}
				}
				if repair {
					src, done, err := repairSource(c, root, repoLoc, bundle)
					if err != nil {
						return err
					}
					defer done()
					if fixed, err = n.Repair(c.Context(), src); err != nil {
						if fixed != nil && g.json {
							_ = g.output(c.OutOrStdout(), &node.RestartReport{Root: root, Repair: fixed}, nil)
						}
						return err
					}
				} else if repoLoc != "" || bundle != "" {
					return usageError{fmt.Errorf("--repo and --bundle go with --repair")}
				}
				rep, err := n.Restart(c.Context(), units)
				if rep != nil {
					rep.Repair = fixed
				}
				if errors.Is(err, node.ErrUnknownUnit) {
					return usageError{fmt.Errorf("--unit: %w", err)}
				}
				if rep != nil && (err == nil || g.json) {
					_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) {
						if fixed != nil {
							printRepair(w, fixed)
						}
						fmt.Fprintf(w, "restarted on %s (asked: %v):\n", root, rep.Units)
						printActions(w, rep.Restarted)
					})
				}
				return err
			}
			for _, name := range []string{"bundle", "restart-with", "lock-wait"} {
				if c.Flags().Changed(name) {
					return usageError{fmt.Errorf("--%s goes with --root, not --inventory", name)}
				}
			}
			if !repair && (repoLoc != "" || transfer != "") {
				return usageError{fmt.Errorf("--repo and --transfer go with --repair")}
			}
			nodes, err := fleetNodes(inventory, group, maxUnavail, &o.WaveOptions)
			if err != nil {
				return err
			}
			o.Units = units
			o.Progress = g.progress()
			if repair {
				o.Repair = true
				if repoLoc == "" {
					return usageError{fmt.Errorf("--repair needs --repo: the overlays the nodes' layers are rebuilt from")}
				}
				if err := overlayTransfer(&o.Transfer, repoLoc, transfer); err != nil {
					return err
				}
				tmpDir, err := scratch.MkdirTemp("restart")
				if err != nil {
					return err
				}
				defer tmpDir.RemoveAll()
				tmp := tmpDir.Path
				o.Transfer.Bundle = func(ctx context.Context, line, from, to string) (string, error) {
					return writeBundle(ctx, repoLoc, line, from, to, tmp)
				}
			}
			defer o.SSH.Close()
			rep, err := fleet.Restart(c.Context(), nodes, o)
			if err != nil {
				return err
			}
			if err := g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				printResults(w, rep.Nodes, rep.Counts, rep.Halted)
			}); err != nil {
				return err
			}
			return rep.Err()
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "node root directory")
	f.StringVar(&inventory, "inventory", "", "fleet inventory (YAML)")
	f.StringSliceVar(&units, "unit", nil, "restart this unit (repeatable; default: the managed services)")
	f.StringVar(&restartWith, "restart-with", "", "with --root: systemd (default for /) or exec:'CMD {unit} {action}'")
	f.DurationVar(&wait, "lock-wait", 30*time.Second, "with --root: how long to wait for another strata run to finish")
	f.StringVar(&group, "group", "", "with --inventory: only the nodes of this group")
	f.IntVar(&o.Canary, "canary", 0, "with --inventory: nodes in the first wave, which must all succeed first")
	f.StringVar(&maxUnavail, "max-unavailable", "1", "with --inventory: nodes restarting at once, a count or a percentage")
	f.IntVar(&o.Parallel, "parallel", 16, "with --inventory: SSH sessions at once within a wave")
	f.DurationVar(&o.HealthTimeout, "health-timeout", 2*time.Minute, "with --inventory: how long a node may take to report healthy")
	f.DurationVar(&o.NodeTimeout, "node-timeout", 30*time.Minute, "with --inventory: how long the work on one node may take")
	f.BoolVar(&repair, "repair", false, "first restore every file of the managed tree that drifted from the node's head (verify-sequence --files), from --repo")
	f.StringVar(&repoLoc, "repo", "", "with --repair: the repository (directory or URL) holding the nodes' overlays")
	f.StringVar(&bundle, "bundle", "", "with --root --repair: a bundle holding the node's overlays instead of --repo (- reads stdin)")
	f.StringVar(&transfer, "transfer", "", "with --inventory --repair: ssh (send a bundle) or pull (nodes fetch from the --repo URL)")
	o.SSH = sshFlags(f)
	return c
}

// repairSource opens where restart --repair --root takes overlays from.
func repairSource(c *cobra.Command, root, repoLoc, bundle string) (node.Source, func(), error) {
	switch {
	case (repoLoc == "") == (bundle == ""):
		return node.Source{}, nil, usageError{fmt.Errorf("--repair needs --repo REPO or --bundle B.tar (one of them)")}
	case repoLoc != "":
		return node.Source{Repo: repoLoc}, func() {}, nil
	}
	bs, err := openBundleArg(c, bundle, root)
	if err != nil {
		return node.Source{}, nil, err
	}
	return node.Source{Repo: bundle, Store: bs}, func() { bs.Close() }, nil
}

func printRepair(w io.Writer, r *node.RepairReport) {
	if len(r.Drift) == 0 {
		fmt.Fprintf(w, "node %s: no drift, nothing to repair\n", r.Root)
		return
	}
	fmt.Fprintf(w, "repaired %s: rebuilt layers %s from their overlays\n", r.Root, strings.Join(r.Layers, " "))
	for _, d := range r.Drift {
		fmt.Fprintf(w, "  was: %s\n", printable(d))
	}
}
