package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/restarter"
)

// restarterFor parses --restart-with.
func restarterFor(spec string, root string) (node.Restarter, error) {
	switch {
	case spec == "" && root == "/":
		return restarter.Systemd{Root: root}, nil
	case spec == "" || spec == "none":
		return nil, nil
	case spec == "systemd":
		return restarter.Systemd{Root: root}, nil
	case strings.HasPrefix(spec, "exec:"):
		tmpl := strings.TrimPrefix(spec, "exec:")
		if strings.TrimSpace(tmpl) == "" {
			return nil, usageError{fmt.Errorf("--restart-with exec: needs a command")}
		}
		return restarter.Exec{Template: tmpl}, nil
	}
	return nil, usageError{fmt.Errorf("--restart-with %q: want systemd, none or exec:'CMD {unit} {action}'", spec)}
}

// observeWithHelp is the help of --restart-with where it names the
// service manager to ask, not one to drive.
const observeWithHelp = "the node's service manager, asked what each unit loaded and to validate a changed config: systemd (default with --root /) or none"

// observerFor parses --restart-with for a command that only asks the
// service manager (status, health): nil when it cannot be asked.
func observerFor(spec, root string) (node.Observer, error) {
	if spec != "" && spec != "systemd" && spec != "none" {
		return nil, usageError{fmt.Errorf("--restart-with %q: want systemd or none here", spec)}
	}
	r, err := restarterFor(spec, root)
	if err != nil {
		return nil, err
	}
	obs, _ := r.(node.Observer)
	return obs, nil
}

func newApplyCmd(g *globals) *cobra.Command {
	var src node.Source
	var o node.ApplyOptions
	var wait time.Duration
	var root, restartWith, diskPath, bundle string
	c := &cobra.Command{
		Use: "apply-overlay (--root DIR | --disk DISK) (FILE ... | --repo REPO [--through V] | --bundle B.tar [--through V])",
		Example: `  strata apply-overlay --root / --repo https://repo.example.net/strata/
  strata apply-overlay --root node --repo repo --through 1.0.4 --dry-run
  strata apply-overlay --disk node.img repo/overlays/demo-1.0.1.overlay.tar.zst`,
		Short: "Verify overlays, apply them in order, restart only what they touch",
		Long: `Apply overlays to the node at --root. Everything is verified before the node
changes: signatures against the node's keys, the parent chain against the
node's ledger, the image constraint, every path and every payload member.
Each overlay applies atomically under a journal and is recorded in the
ledger; then its restart plan runs. A restart failure rolls the overlay back.

--restart-with: systemd (default when --root is /), none (default otherwise:
restarts are recorded as pending), or exec:'CMD {unit} {action}'.

--disk applies to the node on a provisioned disk that is not running (a
disk image file or a block device that is not mounted), mounted the way
it boots, in a private mount namespace; its restarts are recorded as
pending.`,
		Args: args(cobra.ArbitraryArgs),
		RunE: func(c *cobra.Command, a []string) error {
			src.Files = a
			if btoi(len(a) > 0)+btoi(src.Repo != "")+btoi(bundle != "") != 1 {
				return usageError{fmt.Errorf("give overlay FILEs, --repo REPO or --bundle B.tar (one of them)")}
			}
			if src.Through != "" && src.Repo == "" && bundle == "" {
				return usageError{fmt.Errorf("--through needs --repo or --bundle")}
			}
			if err := node.CheckChannel(src.Channel); err != nil {
				return usageError{fmt.Errorf("--channel: %w", err)}
			}
			if src.Channel != "" && src.Repo == "" {
				return usageError{fmt.Errorf("--channel needs --repo (a bundle carries the versions it was made for)")}
			}
			if src.Channel != "" && src.Through != "" {
				return usageError{fmt.Errorf("--channel and --through: --through names the version to stop at, whatever its channel; give one")}
			}
			if (root == "") == (diskPath == "") {
				return usageError{fmt.Errorf("give --root DIR or --disk DISK (not both)")}
			}
			if bundle != "" {
				bs, err := openBundleArg(c, bundle, root)
				if err != nil {
					return err
				}
				defer bs.Close()
				src.Repo, src.Store = bundle, bs
				if src.Through == "" {
					src.Through = bs.Info.To
				}
			}
			if diskPath != "" {
				return applyDisk(c, g, diskPath, src, o, node.Options{LockWait: wait, Progress: g.progress()}, a)
			}
			r, err := restarterFor(restartWith, root)
			if err != nil {
				return err
			}
			n, err := node.Open(root, node.Options{Restarter: r, LockWait: wait, Progress: g.progress()})
			if err != nil {
				return err
			}
			rep, err := n.Apply(c.Context(), src, o)
			if rep != nil && (err == nil || g.json) {
				_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) { printApply(w, rep) })
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "node root directory")
	f.StringVar(&diskPath, "disk", "", "provisioned disk (image file or block device) of a node that is not running")
	f.StringVar(&src.Repo, "repo", "", "apply every pending overlay of this repository")
	f.StringVar(&bundle, "bundle", "", "apply the pending overlays a bundle (strata bundle) carries; - reads it from stdin")
	versionVar(c, &src.Through, "through", "with --repo or --bundle: stop at this version")
	f.StringVar(&src.Channel, "channel", "", "with --repo: stable (the default: stop at the newest release) or candidate (prereleases too)")
	f.BoolVar(&o.DryRun, "dry-run", false, "print the plan and change nothing")
	f.BoolVar(&o.Force, "force", false, "replace and delete files changed on the node since its head (refused otherwise); the ledger records each path")
	f.StringVar(&restartWith, "restart-with", "", "systemd, none or exec:'CMD {unit} {action}'")
	f.DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	return c
}

// openBundleArg opens the bundle of a --bundle flag: a file, or "-" for
// one on stdin (strata rollout sends one over SSH), spooled beside the
// node's state.
func openBundleArg(c *cobra.Command, bundle, root string) (*repo.BundleStore, error) {
	if bundle == "-" {
		return repo.SpoolBundle(c.Context(), c.InOrStdin(), spoolDirs(), repo.MaxSpooledBundle)
	}
	return repo.OpenBundle(c.Context(), bundle)
}

// spoolDirs are where a bundle read from stdin or an image fetched for an
// upgrade is kept while it is used, the first one reachable without a
// symbolic link (package safefile): $TMPDIR when it is set, else /var/tmp
// (persistent storage, where /tmp may be memory), else the system's
// temporary directory. They are the host's, never a directory below a
// --root node's root, whose /var/tmp a signed overlay may have made a
// link (on a node run with --root /, /var/tmp is checked the same way).
func spoolDirs() []string {
	if d := os.Getenv("TMPDIR"); d != "" {
		return []string{d}
	}
	return []string{"/var/tmp", os.TempDir()}
}

func printApply(w io.Writer, rep *node.ApplyReport) {
	verb := "applied"
	if rep.DryRun {
		verb = "would apply"
	}
	if len(rep.Plans) == 0 {
		fmt.Fprintf(w, "node %s is at %s: nothing to apply\n", rep.Root, rep.From.Version)
	}
	for _, p := range rep.Plans {
		if p.AlreadyApplied {
			fmt.Fprintf(w, "%s: already applied, nothing to do\n", p.Version)
			continue
		}
		fmt.Fprintf(w, "%s %s (parent %s): %d writes, %d deletes\n", verb, p.Version, p.Parent, len(p.Writes), len(p.Deletes))
		for _, x := range p.Writes {
			fmt.Fprintf(w, "  write  /%s\n", x)
		}
		for _, x := range p.Deletes {
			fmt.Fprintf(w, "  delete /%s\n", x)
		}
		if len(p.Actions) == 0 {
			fmt.Fprintln(w, "  services: none affected")
		}
		printActions(w, p.Actions)
		printLive(w, p.Live)
		if len(p.Unclaimed) > 0 {
			fmt.Fprintf(w, "  no service claims /%s: nothing restarted for it\n", strings.Join(p.Unclaimed, ", /"))
		}
	}
	if !rep.DryRun && rep.From != rep.To {
		fmt.Fprintf(w, "node %s: %s -> %s\n", rep.Root, rep.From.Version, rep.To.Version)
	}
	if len(rep.Pending) > 0 {
		fmt.Fprintln(w, "pending restarts (restart debt):")
		printActions(w, rep.Pending)
	}
	if len(rep.HeldBack) > 0 {
		fmt.Fprintf(w, "held back: %s (prereleases after the newest release; --channel candidate or --through takes them)\n", strings.Join(rep.HeldBack, ", "))
	}
}

func newRollbackCmd(g *globals) *cobra.Command {
	var root, diskPath, restartWith, to string
	var noHold bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "rollback (--root DIR | --disk DISK) [--to V]",
		Short: "Revert the last applied overlay (or all above --to V) and restart what it touched",
		Long: `Revert the node's last applied overlay from the undo data kept when it was
applied, record a rollback in the ledger, and restart or reload what the
reverted files call for (--restart-with as for apply-overlay). With --to V
every overlay above V is reverted, newest first, each recorded as its own
rollback, and the restarts of all of them run once, after the last; V is
where the node's overlays start or one it applied. With --root the node
is then held where the rollback took it (strata hold): its agent,
apply-overlay and rollouts leave it there until strata release; --no-hold
does not hold it. The same goes for --disk.

--disk rolls back the node on a provisioned disk that is not running
(restarts are left as debt: nothing runs on the disk). The rollback is
first checked with the disk mounted read-only: a refused one leaves the
disk byte for byte as it was.`,
		Example: `  strata rollback --root /
  strata rollback --root / --to 1.0.4
  strata rollback --root node --restart-with 'exec:echo {unit} {action}'`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if (root == "") == (diskPath == "") {
				return usageError{fmt.Errorf("give --root DIR or --disk DISK (not both)")}
			}
			var r node.Restarter
			var rep *node.RollbackReport
			var err error
			if diskPath != "" {
				var ran bool
				if rep, ran, err = rollbackDisk(c, g, diskPath, to, !noHold, wait); ran {
					return err
				}
			} else {
				if r, err = restarterFor(restartWith, root); err != nil {
					return err
				}
				var n *node.Node
				if n, err = node.Open(root, node.Options{Restarter: r, LockWait: wait, Progress: g.progress()}); err != nil {
					return err
				}
				if noHold {
					rep, err = n.Rollback(c.Context(), to)
				} else {
					// The operator's decision holds: an agent following the
					// line would otherwise apply the same overlays again.
					rep, err = n.RollbackAndHold(c.Context(), to, "strata rollback")
				}
			}
			if rep == nil || (err != nil && !g.json) {
				// A failed restart after the rollback committed: the error
				// says what happened, and JSON gets the report too.
				return err
			}
			oerr := g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				var vs []string
				for _, s := range rep.Steps {
					vs = append(vs, s.Version)
				}
				fmt.Fprintf(w, "rolled back %s: node %s is at %s\n", strings.Join(vs, ", "), rep.Root, rep.Head.Version)
				if r == nil && len(rep.Actions) > 0 {
					// Worded as apply-overlay words them.
					fmt.Fprintln(w, "pending restarts (restart debt):")
				}
				printActions(w, rep.Actions)
				if rep.Held != nil {
					fmt.Fprintf(w, "held at %s: nothing moves the node (its agent, apply-overlay, a rollout) until strata release --root %s\n", rep.Held.Head.Version, rep.Root)
				}
			})
			if err != nil {
				return err
			}
			return oerr
		},
	}
	versionVar(c, &to, "to", "revert every overlay above this version")
	c.Flags().BoolVar(&noHold, "no-hold", false, "do not hold the node where the rollback took it (an agent following the line applies the overlays again); --root or --disk")
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&diskPath, "disk", "", "provisioned disk (image file or block device) of a node that is not running")
	c.Flags().StringVar(&restartWith, "restart-with", "", "systemd, none or exec:'CMD {unit} {action}'")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	return c
}

func newRestartPendingCmd(g *globals) *cobra.Command {
	var root, diskPath, restartWith string
	var wait time.Duration
	c := &cobra.Command{
		Use: "restart-pending (--root DIR [--restart-with systemd|exec:'CMD {unit} {action}'] | --disk DISK)",
		Example: `  strata restart-pending --root /
  strata restart-pending --root node --restart-with 'exec:echo {unit} {action}'
  strata restart-pending --disk node.img`,
		Short: "Carry out the restarts recorded as pending (restart debt) and record them",
		Long: `Carry out the node's restart debt (restarts and reloads applies and
rollbacks recorded as pending), each unit once, and record them.

--disk settles the debt of the node on a provisioned disk that is not
running: nothing runs, as the next boot starts every service with the
node's tree, and a restart record marked offline says so. A node without
debt is read with the disk mounted read-only and not a byte changes.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if (root == "") == (diskPath == "") {
				return usageError{fmt.Errorf("give --root DIR or --disk DISK (not both)")}
			}
			where := root
			var rep *node.SettleReport
			var err error
			if diskPath != "" {
				if restartWith != "" {
					return usageError{fmt.Errorf("--restart-with does not go with --disk: nothing runs on a disk that is not running")}
				}
				where = diskPath
				var ran bool
				if rep, ran, err = settleDisk(c, g, diskPath, wait); ran {
					return err
				}
			} else {
				if restartWith == "" && root != "/" {
					return usageError{fmt.Errorf("--root %s is not the running system, whose systemd restart-pending drives by default (--root /); say how to restart its services: --restart-with systemd (the host's systemd) or exec:'CMD {unit} {action}'", root)}
				}
				if restartWith == "none" {
					return usageError{fmt.Errorf("--restart-with none would settle nothing")}
				}
				if restartWith != "" && restartWith != "systemd" && !strings.HasPrefix(restartWith, "exec:") {
					return usageError{fmt.Errorf("--restart-with %q: want systemd or exec:'CMD {unit} {action}'", restartWith)}
				}
				r, rerr := restarterFor(restartWith, root)
				if rerr != nil {
					return rerr
				}
				n, oerr := node.Open(root, node.Options{Restarter: r, LockWait: wait, Progress: g.progress()})
				if oerr != nil {
					return oerr
				}
				rep, err = n.SettlePending(c.Context())
			}
			if rep != nil && (err == nil || g.json) {
				_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) {
					if len(rep.Pending) == 0 {
						fmt.Fprintf(w, "node %s has no pending restarts\n", where)
						return
					}
					if diskPath != "" {
						fmt.Fprintf(w, "settled %d pending restarts on %s offline (nothing ran: the next boot starts every service with the tree):\n", len(rep.Restarted), where)
					} else {
						fmt.Fprintf(w, "settled %d of %d pending restarts on %s:\n", len(rep.Restarted), len(rep.Pending), where)
					}
					printActions(w, rep.Restarted)
				})
			}
			return err
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&diskPath, "disk", "", "provisioned disk (image file or block device) of a node that is not running")
	c.Flags().StringVar(&restartWith, "restart-with", "", "systemd (default with --root /) or exec:'CMD {unit} {action}'")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	return c
}
