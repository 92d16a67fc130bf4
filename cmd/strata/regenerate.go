package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder"
)

func regenerateCmd(g *globals) *cobra.Command {
	var repoDir, through, out, keyPath, line string
	var pubs []string
	c := &cobra.Command{
		Use: "regenerate --repo REPO [--through V] --out DIR [--key K [--history-pub OLD.pub ...]]",
		Example: `  strata regenerate --repo repo --out out --key ci.key
  strata regenerate --repo repo --through 1.0.5 --out out --key ci.key`,
		Short: "Fold the line's image and overlays into a fresh image for new machines",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if keyPath == "" && len(pubs) > 0 {
				return usageError{fmt.Errorf("--history-pub needs --key: the key that signs the index and the result")}
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			trust, err := loadPubs(pubs)
			if err != nil {
				return err
			}
			res, err := builder.Regenerate(c.Context(), repoDir, line, through, out, builder.WithKey(key), builder.WithTrust(trust), builder.WithProgress(g.progress()))
			if err != nil {
				return err
			}
			return printImage(g, c.OutOrStdout(), res)
		},
	}
	c.Flags().StringVar(&repoDir, "repo", "", "repository")
	versionVar(c, &through, "through", "fold overlays up to this version (default: the head)")
	c.Flags().StringVar(&out, "out", "", "output directory")
	c.Flags().StringVar(&keyPath, "key", "", "signing key")
	c.Flags().StringVar(&line, "line", "", "line (when the repository has several)")
	c.Flags().StringArrayVar(&pubs, "history-pub", nil, "repeatable; a public key that verifies the line's image and overlays besides --key (never the index, which --key must sign): the old key, after a rotation brought --key in")
	required(c, "repo", "out")
	return c
}
