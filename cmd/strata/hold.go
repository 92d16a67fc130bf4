package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/node"
)

func newHoldCmd(g *globals) *cobra.Command {
	var root, reason string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "hold --root DIR [--reason TEXT]",
		Short: "Hold a node at its head: nothing moves it until strata release",
		Long: `Hold the node at its head. While it is held, apply-overlay refuses (exit 3,
naming the hold), its agent leaves it where it is and says so in its
health, a rollout skips it, and status and the fleet view show it as
held at its head, with the reason. strata rollback holds the node where it
took it. Holding a held node replaces the reason.`,
		Example: `  strata hold --root / --reason "waiting for the vendor's fix"`,
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			n, err := node.Open(root, node.Options{LockWait: wait})
			if err != nil {
				return err
			}
			h, err := n.Hold(c.Context(), reason)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), h, func(w io.Writer) {
				fmt.Fprintf(w, "held %s at %s (%s): strata release --root %s lets it follow its line\n", root, h.Head.Version, h.Reason, root)
			})
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&reason, "reason", "held by strata hold", "why, shown wherever the hold is")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}

func newReleaseCmd(g *globals) *cobra.Command {
	var root string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "release --root DIR",
		Short: "Release a held node: it follows its line again",
		Long: `Release the node's hold (strata hold, strata rollback): apply-overlay,
its agent (at its next poll) and rollouts move it again. A node that is
not held is left as it is.`,
		Example: `  strata release --root /`,
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			n, err := node.Open(root, node.Options{LockWait: wait})
			if err != nil {
				return err
			}
			h, err := n.Release(c.Context())
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), map[string]any{"root": root, "released": h}, func(w io.Writer) {
				if h == nil {
					fmt.Fprintf(w, "%s was not held\n", root)
					return
				}
				fmt.Fprintf(w, "released %s (held at %s since %s: %s)\n", root, h.Head.Version, h.Since, h.Reason)
			})
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}
