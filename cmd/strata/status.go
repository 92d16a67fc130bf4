package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/overlay"
)

func newStatusCmd(g *globals) *cobra.Command {
	var root string
	c := &cobra.Command{
		Use:   "status --root DIR",
		Short: "Show a node's image, head, layers, debts and last failure",
		Long: `Show what the node at --root is and what it owes: its backend (dir or
overlayfs) and, for overlayfs, whether its stacks are active; its line,
image and head; the overlays in effect (the layers, oldest first); an
interrupted run waiting to be settled; restarts still due (restart-pending
pays them); units that take a change only at the next boot (reboot
required: the bus, PID 1's own daemons, units refusing manual restarts);
and the last failed attempt, if the head has not moved since. It changes
nothing.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if root == "" {
				return usageError{fmt.Errorf("--root is required")}
			}
			st, err := overlay.NodeStatus(c.Context(), root)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), st, func(w io.Writer) { printStatus(w, st) })
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	return c
}

func printStatus(w io.Writer, st *overlay.Status) {
	backend := st.Backend
	if st.Active != nil {
		backend += map[bool]string{true: " (active)", false: " (not active: run strata activate)"}[*st.Active]
	}
	layers := strings.Join(st.Layers, " ")
	if layers == "" {
		layers = "none"
	}
	fmt.Fprintf(w, "node      %s\nbackend   %s\nline      %s\nimage     %s\nhead      %s (%s)\nlayers    %s\n",
		st.Root, backend, st.Line, st.Image.Version, st.Head.Version, st.Head.Digest, layers)
	if st.Interrupted != "" {
		fmt.Fprintf(w, "interrupted  %s\n", st.Interrupted)
	}
	for _, a := range st.Pending {
		fmt.Fprintf(w, "pending   %s %s (because of %s)\n", a.Action, a.Unit, strings.Join(a.Because, ", "))
	}
	for _, a := range st.Reboot {
		fmt.Fprintf(w, "reboot    %s (%s)\n", a.Unit, strings.Join(a.Because, "; "))
	}
	if f := st.LastFailure; f != nil {
		fmt.Fprintf(w, "failed    %s at %s: %s\n", f.Version, f.Time, f.Error)
	}
}
