package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/strata-dev/strata/node"
)

func newGCCmd(g *globals) *cobra.Command {
	var root string
	var keep int
	var wait time.Duration
	c := &cobra.Command{
		Use: "gc --root DIR [--keep N]",
		Example: `  strata gc --root /
  strata gc --root node --keep 3`,
		Short: "Prune rollback data beyond the newest N overlays, and state nothing owns",
		Long: `Prune a node's state: the undo data of all but the newest --keep overlays
in effect (on a directory node; rollback then stops before the pruned
ones and says so), and whatever no overlay in effect owns (stored
manifests, undo data or layers left by a crash or a rollback). An
interrupted change is settled first, never pruned. The layers of an
overlayfs node are its tree: gc keeps every one in effect.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if keep < 0 {
				return usageError{fmt.Errorf("--keep %d: want 0 or more", keep)}
			}
			n, err := node.Open(root, node.Options{LockWait: wait})
			if err != nil {
				return err
			}
			rep, err := n.GC(c.Context(), keep)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				for _, n := range rep.Notes {
					fmt.Fprintf(w, "node %s: %s\n", rep.Root, n)
				}
				if len(rep.Undo) == 0 {
					fmt.Fprintf(w, "node %s: nothing to prune (rollback reaches the newest %d overlays)\n", rep.Root, rep.Keep)
					return
				}
				fmt.Fprintf(w, "node %s: pruned the undo data of %s; rollback reaches the newest %d overlays\n", rep.Root, strings.Join(rep.Undo, ", "), rep.Keep)
			})
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().IntVar(&keep, "keep", 5, "how many of the newest overlays stay possible to roll back")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}
