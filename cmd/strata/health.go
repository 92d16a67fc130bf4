package main

import (
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/agent"
)

func newHealthCmd(g *globals) *cobra.Command {
	var root, restartWith string
	c := &cobra.Command{
		Use:   "health --root DIR",
		Short: "Print the node's health document (JSON), as its agent serves it",
		Long: `Print, as JSON, what the agent's GET /health reports for the node at --root
(line, image, head, layers, restarts owed, the last failure, the managed
config files with their digests), without the agent's own state, and the
node's clock. strata status and strata rollout --inventory run it over SSH
on nodes whose inventory entry has no health URL. It changes nothing.`,
		Example: `  strata health --root /`,
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			obs, err := observerFor(restartWith, root)
			if err != nil {
				return err
			}
			h, err := agent.ReadHealth(c.Context(), root, obs)
			if err != nil {
				return err
			}
			h.Now = time.Now().UTC()
			enc := json.NewEncoder(c.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(h)
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&restartWith, "restart-with", "", observeWithHelp)
	required(c, "root")
	return c
}
