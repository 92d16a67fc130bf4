package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-dev/strata/node"
)

func newActivateCmd(g *globals) *cobra.Command {
	var root, run string
	c := &cobra.Command{
		Use:     "activate --root DIR [--run DIR]",
		Example: `  strata activate --root /root --run /run`,
		Short:   "Stack a node's layers on its managed hierarchies (boot, recovery)",
		Long: `Make the managed hierarchies (/etc, /usr, /opt) of the node whose image is
mounted at --root the overlayfs stacks its ledger says: the layers of the
applied overlays, oldest at the bottom, above the image. The image itself
stays reachable at RUN/strata/image (--run, default ROOT/run), a read-only
clone of the root mount.

An initramfs runs it before PID 1 starts, after mounting the image at
--root and the state partition's var on ROOT/var (and passes its own /run,
which becomes the node's). On a running node it finishes or takes back a
switch that a crash interrupted and rebuilds the stacks; it is idempotent.

On a trial boot of a staged whole-image upgrade (strata upgrade) it stacks
the layers the upgrade keeps. When an upgrade is staged but the node booted
its old image again (the new one used up its tries), it records the failed
upgrade in the ledger and drops the staged state.
Nodes whose backend is a directory tree have nothing to activate (exit 3).`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if root == "" {
				return usageError{fmt.Errorf("--root is required")}
			}
			n, err := node.Open(root, node.Options{Run: run})
			if err != nil {
				return err
			}
			rep, err := n.ActivateBoot(c.Context())
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				layers := strings.Join(rep.Layers, " ")
				if layers == "" {
					layers = "none"
				}
				fmt.Fprintf(w, "activated %s at %s (layers: %s)\n", rep.Root, rep.Head.Version, layers)
				if rep.Trial != nil {
					fmt.Fprintf(w, "trial boot of image %s: strata upgrade --confirm commits it once the node is healthy\n", rep.Trial.Version)
				}
				if f := rep.FailedUpgrade; f != nil {
					fmt.Fprintf(w, "upgrade failed, recorded: %s\n", f.Error)
				}
				if r := rep.LayerRefused; r != nil {
					fmt.Fprintf(w, "LAYER REFUSED: %s; the node runs the layers below it\n", r.Error)
				}
				for _, msg := range rep.Warnings {
					fmt.Fprintf(w, "warning: %s\n", msg)
				}
				if rep.Refused != "" {
					fmt.Fprintf(w, "a boot since the last one refused a root: %s\n", rep.Refused)
				}
			})
		},
	}
	c.Flags().StringVar(&root, "root", "", "where the node's image is mounted")
	c.Flags().StringVar(&run, "run", "", "runtime directory (default ROOT/run)")
	return c
}
