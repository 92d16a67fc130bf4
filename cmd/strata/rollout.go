package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

// sshFlags adds the SSH settings of the fleet commands to f.
func sshFlags(f *pflag.FlagSet) *fleet.SSH {
	s := &fleet.SSH{}
	f.StringVar(&s.KnownHosts, "known-hosts", "", "known_hosts file the nodes' host keys are checked against (default ~/.ssh/known_hosts)")
	f.StringSliceVar(&s.Identities, "identity", nil, "SSH private key file (default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa; ssh-agent keys are used too)")
	f.StringVar(&s.User, "user", "root", "SSH user for nodes whose inventory entry names none")
	f.DurationVar(&s.Timeout, "ssh-timeout", 10*time.Second, "how long connecting to a node may take")
	f.StringVar(&s.Strata, "remote-strata", "/usr/bin/strata", "the strata program on the nodes")
	return s
}

// fleetNodes loads the inventory's nodes of group and completes the wave
// settings: --max-unavailable against their number, --canary and
// --parallel checked.
func fleetNodes(inventory, group, maxUnavail string, o *fleet.WaveOptions) ([]fleet.Node, error) {
	nodes, err := loadNodes(inventory, group)
	if err != nil {
		return nil, err
	}
	if o.MaxUnavailable, err = fleet.ParseMaxUnavailable(maxUnavail, len(nodes)); err != nil {
		return nil, usageError{fmt.Errorf("--max-unavailable: %w", err)}
	}
	if o.Canary < 0 || o.Parallel < 1 {
		return nil, usageError{fmt.Errorf("--canary must be 0 or more and --parallel at least 1")}
	}
	if o.NodeTimeout > 0 && o.NodeTimeout < o.HealthTimeout {
		return nil, usageError{fmt.Errorf("--node-timeout %s is shorter than --health-timeout %s, which it includes", o.NodeTimeout, o.HealthTimeout)}
	}
	return nodes, nil
}

// loadNodes reads the inventory and selects group.
func loadNodes(path, group string) ([]fleet.Node, error) {
	inv, err := fleet.LoadInventory(path)
	if errors.Is(err, fleet.ErrInventory) {
		return nil, usageError{err}
	}
	if err != nil {
		return nil, err
	}
	nodes := inv.Select(group)
	if len(nodes) == 0 {
		return nil, usageError{fmt.Errorf("no node of the inventory is in group %q", group)}
	}
	return nodes, nil
}

func newRolloutCmd(g *globals) *cobra.Command {
	var inventory, repoLoc, line, group, through, maxUnavail, transfer, via, keyPath, channel string
	var o fleet.RolloutOptions
	c := &cobra.Command{
		Use:   "rollout --inventory INV --repo REPO [--through V] [--group G] [--canary N] [--max-unavailable N|P%] [--parallel N]",
		Short: "Bring the inventory's nodes to the line's head (or --through V) over SSH, in waves",
		Long: `Apply the pending overlays of REPO's line on every node of the inventory
(or of --group), over SSH: host keys checked against --known-hosts, keys
from ssh-agent and --identity.

First every node is asked for its health (strata health over SSH). Nodes
that cannot be reached are named as unreachable; nodes on another line, at
a head the line does not have, or past the target are failed; nodes at the
target are current and left alone, so a rerun converges.

The rest are updated in waves: the --canary nodes first, then waves of at
most --max-unavailable nodes, less the nodes already unreachable (they
are out of service too). Each node runs apply-overlay, which verifies
everything and restarts only what the overlays touch, taking an overlay
back when its restarts or health checks fail; then its health (its
agent's URL from the inventory, else over SSH) must report the target
within --health-timeout. A wave in which a node failed is the last: the
rollout halts, later nodes are skipped, and the summary says where.

The overlays travel over SSH as a bundle (--transfer ssh, the default for
a directory), or the nodes fetch them from REPO themselves (--transfer
pull, the default for a URL: REPO must be reachable from the nodes).

With --via agent, nothing goes over SSH: each node's agent (its health
URL in the inventory) is probed, then nudged with a nudge signed by --key,
and applies its own repository's head, which must be the target; the
rollout waits for its health to report it. Waves, halting and the report
are the same.

Every node is listed in the summary: updated, current, failed (with the
reason), unreachable (with the error) or skipped. The exit status is 3
when any node is not at the target.`,
		Example: `  strata rollout --inventory fleet.yaml --repo /srv/repo --canary 1 --max-unavailable 25%
  strata rollout --inventory fleet.yaml --repo https://repo.example.net/ --group web --through 1.4.2
  strata rollout --inventory fleet.yaml --repo https://repo.example.net/ --via agent --key site.key`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			nodes, err := fleetNodes(inventory, group, maxUnavail, &o.WaveOptions)
			if err != nil {
				return err
			}
			switch via {
			case "ssh":
				if keyPath != "" {
					return usageError{fmt.Errorf("--key signs the nudges of --via agent")}
				}
			case "agent":
				if keyPath == "" || transfer != "" {
					return usageError{fmt.Errorf("--via agent needs --key (the nudges are signed) and takes no --transfer (the agents fetch from their own repository)")}
				}
			default:
				return usageError{fmt.Errorf("--via %q: want ssh or agent", via)}
			}
			if err := overlayTransfer(&o.Transfer, repoLoc, transfer); err != nil {
				return err
			}
			if channel != "" && through != "" && via != "agent" {
				return usageError{fmt.Errorf("--channel and --through: --through names the version to bring the nodes to, whatever its channel; give one (with --via agent, --channel names the agents' channel)")}
			}
			if o.LineName, o.Line, err = repo.LineVersions(c.Context(), repoLoc, line); err != nil {
				return err
			}
			if err := node.CheckChannel(channel); err != nil {
				return usageError{fmt.Errorf("--channel: %w", err)}
			}
			// The default target is what the channel's nodes take: the
			// newest release (stable) or the head (candidate).
			o.Target = channelTarget(o.Line, channel)
			if through != "" {
				o.Target = through
			}
			if via == "agent" {
				key, err := loadKey(keyPath)
				if err != nil {
					return err
				}
				if want := channelTarget(o.Line, channel); o.Target != want {
					return usageError{fmt.Errorf("--via agent: the agents on the %s channel apply up to %s; --through %s is not it", channelName(channel), want, through)}
				}
				if _, err := nudge.Sign(key, o.LineName, time.Now()); err != nil {
					return err
				}
				o.Nudge = func() (*nudge.Nudge, error) { return nudge.Sign(key, o.LineName, time.Now()) }
			} else if o.URL == "" {
				tmpDir, err := scratch.MkdirTemp("rollout")
				if err != nil {
					return err
				}
				defer tmpDir.RemoveAll()
				tmp := tmpDir.Path
				o.Bundle = func(ctx context.Context, line, from, to string) (string, error) {
					return writeBundle(ctx, repoLoc, line, from, to, tmp)
				}
			}
			defer o.SSH.Close()
			o.Progress = g.progress()
			rep, err := fleet.Rollout(c.Context(), nodes, o)
			if err != nil {
				return err
			}
			if err := g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				printResults(w, rep.Nodes, rep.Counts, rep.Halted)
				fmt.Fprintf(w, "target %s of line %s\n", rep.Target, printable(rep.Line))
			}); err != nil {
				return err
			}
			return rep.Err()
		},
	}
	f := c.Flags()
	f.StringVar(&inventory, "inventory", "", "fleet inventory (YAML)")
	f.StringVar(&repoLoc, "repo", "", "repository (directory or URL)")
	f.StringVar(&line, "line", "", "the line (when the repository has several)")
	versionVar(c, &through, "through", "bring the nodes to this version (default: the line's newest release, or its head with --channel candidate)")
	f.StringVar(&channel, "channel", "", "stable (default: the newest release is the target) or candidate (the head, prereleases too)")
	f.StringVar(&group, "group", "", "only the nodes of this group")
	f.IntVar(&o.Canary, "canary", 0, "nodes in the first wave, which must all succeed before any other node is touched")
	f.StringVar(&maxUnavail, "max-unavailable", "25%", "nodes out of service at once, a count or a percentage of the nodes")
	f.IntVar(&o.Parallel, "parallel", 16, "SSH sessions at once within a wave")
	f.DurationVar(&o.HealthTimeout, "health-timeout", 2*time.Minute, "how long a node may take to report the target as healthy")
	f.DurationVar(&o.NodeTimeout, "node-timeout", 30*time.Minute, "how long the work on one node (its apply and health wait) may take")
	f.StringVar(&transfer, "transfer", "", "ssh (send a bundle) or pull (nodes fetch from the --repo URL)")
	f.StringVar(&via, "via", "ssh", "ssh (apply over SSH) or agent (nudge each node's agent, signed with --key, and wait for its health)")
	f.StringVar(&keyPath, "key", "", "with --via agent: the key the nudges are signed with (one the nodes trust)")
	o.SSH = sshFlags(f)
	required(c, "inventory", "repo")
	return c
}

// overlayTransfer sets how overlays from repoLoc reach the nodes per
// --transfer: pulled from the URL (the default for a URL) or sent over
// SSH as a bundle (the default for a directory).
func overlayTransfer(t *fleet.Transfer, repoLoc, transfer string) error {
	switch transfer {
	case "":
		if repo.IsURL(repoLoc) {
			t.URL = repoLoc
		}
	case "pull":
		if !repo.IsURL(repoLoc) {
			return usageError{fmt.Errorf("--transfer pull needs --repo to be a URL the nodes can reach")}
		}
		t.URL = repoLoc
	case "ssh":
	default:
		return usageError{fmt.Errorf("--transfer %q: want ssh or pull", transfer)}
	}
	return nil
}

// writeBundle writes the bundle of line's overlays after from through to
// into dir and returns its path.
func writeBundle(ctx context.Context, loc, line, from, to, dir string) (string, error) {
	st, err := repo.Locate(loc)
	if err != nil {
		return "", err
	}
	r, err := repo.OpenStore(ctx, st, nil)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "bundle-"+from+"-"+to+".tar")
	if _, err := repo.WriteBundle(ctx, r, line, from, to, out); err != nil {
		return "", err
	}
	return out, nil
}

// printResults prints a rollout's or restart's nodes, worst first, and the
// summary.
func printResults(w io.Writer, nodes []fleet.NodeResult, counts map[string]int, halted string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tOUTCOME\tWAVE\tHEAD\tNOTE")
	for _, n := range fleet.SortResults(nodes) {
		wave := "-"
		if n.Wave > 0 {
			wave = fmt.Sprint(n.Wave)
		}
		head := n.To
		if head == "" {
			head = n.From
		}
		if n.From != "" && n.To != "" && n.From != n.To {
			head = n.From + " -> " + n.To
		}
		if head == "" {
			head = "-"
		}
		note := n.Error
		if note == "" && len(n.Units) > 0 {
			note = strings.Join(n.Units, ", ")
		}
		if len(n.Repaired) > 0 {
			note = strings.TrimSuffix("repaired "+strings.Join(n.Repaired, ", ")+"; "+note, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, n.Outcome, wave, printable(head), printable(note))
	}
	tw.Flush()
	var parts []string
	for _, s := range []string{fleet.OutcomeUpdated, fleet.OutcomeRestarted, fleet.OutcomeCurrent, fleet.OutcomeFailed, fleet.OutcomeUnreachable, fleet.OutcomeSkipped} {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	fmt.Fprintf(w, "%d nodes: %s\n", len(nodes), strings.Join(parts, ", "))
	if halted != "" {
		fmt.Fprintf(w, "halted: %s\n", printable(halted))
	}
}

// channelTarget is the version nodes on channel take from a line whose
// image and overlays are refs: its head on the candidate channel, else
// its newest release (the image is one).
func channelTarget(refs []manifests.Ref, channel string) string {
	if channel == node.ChannelCandidate {
		return refs[len(refs)-1].Version
	}
	for i := len(refs) - 1; i > 0; i-- {
		if v, err := manifests.ParseVersion(refs[i].Version); err == nil && v.Prerelease() == "" {
			return refs[i].Version
		}
	}
	return refs[0].Version
}

func channelName(ch string) string {
	if ch == "" {
		return node.ChannelStable
	}
	return ch
}
