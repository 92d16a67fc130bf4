package main

import (
	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
)

func regenerateCmd(g *globals) *cobra.Command {
	var repoDir, through, out, keyPath, line string
	var pubs []string
	c := &cobra.Command{
		Use:   "regenerate --repo REPO [--through V] --out DIR [--key K]",
		Short: "Fold the line's image and overlays into a fresh image for new machines",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			trust := &sign.KeySet{}
			for _, p := range pubs {
				if err := trust.Merge(sign.LoadPublicFile(p)); err != nil {
					return err
				}
			}
			res, err := builder.Regenerate(c.Context(), repoDir, line, through, out, builder.WithKey(key), builder.WithTrust(trust), builder.WithProgress(g.progress()))
			if err != nil {
				return err
			}
			return printImage(g, c.OutOrStdout(), res)
		},
	}
	c.Flags().StringVar(&repoDir, "repo", "", "repository")
	c.Flags().StringVar(&through, "through", "", "fold overlays up to this version (default: the head)")
	c.Flags().StringVar(&out, "out", "", "output directory")
	c.Flags().StringVar(&keyPath, "key", "", "signing key")
	c.Flags().StringVar(&line, "line", "", "line (when the repository has several)")
	c.Flags().StringArrayVar(&pubs, "pub", nil, "public key also trusted to verify the line, besides --key's: the one its image was signed with, when a key rotation brought --key in")
	required(c, "repo", "out")
	return c
}
