package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

func newNodeCmd(g *globals) *cobra.Command {
	nc := &cobra.Command{Use: "node", Short: "Look at a node"}
	var root string
	h := &cobra.Command{
		Use:   "history --root DIR",
		Short: "The node's ledger as a history: applies, rollbacks, failures, restarts, upgrades",
		Long: `Show the node's ledger, oldest first, as a history: what was provisioned,
applied (and who signed each overlay), rolled back, tried
and taken back, repaired and upgraded; the restarts each record left
pending, carried out or deferred to a reboot; and the restart debt the
node still has. The ledger's hash chain is checked as it is read; nothing
changes. strata verify-sequence audits the node against its repository.`,
		Example: `  strata node history --root /
  strata --json node history --root node`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			n, err := node.Open(root, node.Options{})
			if err != nil {
				return err
			}
			hist, err := n.History()
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), hist, func(w io.Writer) { printHistory(w, hist) })
		},
	}
	h.Flags().StringVar(&root, "root", "", "node root directory (/ for the running node)")
	required(h, "root")
	nc.AddCommand(h)
	return nc
}

func printHistory(w io.Writer, h *node.NodeHistory) {
	fmt.Fprintf(w, "node %s: line %s, image %s, head %s\n", h.Root, h.Line, h.Image, h.Head.Version)
	for _, e := range h.Entries {
		what := node.Describe(e.LedgerEntry)
		if e.KeyID != "" && e.Action == manifests.LedgerApply {
			what += ", signed by " + e.KeyID
		}
		if e.Reverts != "" {
			what += ", reverts " + e.Reverts
		}
		if e.InEffect {
			what += " (in effect)"
		}
		fmt.Fprintf(w, "  %3d  %s  %-9s  %s\n", e.Seq, e.Time, e.Action, what)
		if e.KeyID != "" && e.Action == manifests.LedgerFailed {
			fmt.Fprintf(w, "       %-*s  signed by %s\n", len(e.Time)+11, "", e.KeyID)
		}
		printHistoryActions(w, "planned", e.Pending)
		printHistoryActions(w, "done", e.Done)
		printHistoryActions(w, "at reboot", e.Reboot)
	}
	if u := h.Staged; u != nil {
		fmt.Fprintf(w, "staged: upgrade to image %s on root %s since %s (boot entry %s)\n", u.Record.Version, strings.ToUpper(u.Record.Slot), u.Staged, u.Entry)
	}
	if len(h.Pending) == 0 {
		fmt.Fprintln(w, "restart debt: none")
		return
	}
	fmt.Fprintln(w, "pending restarts (restart debt):")
	printActions(w, h.Pending)
}

func printHistoryActions(w io.Writer, label string, as []manifests.ServiceAction) {
	for _, a := range as {
		fmt.Fprintf(w, "         %-9s %s %s\n", label, a.Action, a.Unit)
	}
}
