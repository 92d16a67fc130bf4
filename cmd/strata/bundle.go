package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/repo"
)

func newBundleCmd(g *globals) *cobra.Command {
	var repoLoc, line, from, to, out string
	c := &cobra.Command{
		Use: "bundle --repo REPO --from V [--to W] --out B.tar",
		Example: `  strata bundle --repo repo --from 1.0.2 --out site-b.tar
  strata bundle --repo https://repo.example.net/strata/ --from 1.0.2 --to 1.0.7 --out b.tar`,
		Short: "Write the signed chain from version V to W into one file, for a node with no network",
		Long: `Write a bundle: the repository's signed index and the overlays of the
line after --from (the node's head; the image version for a fresh node) up
to and including --to (default: the head), in one uncompressed tar. The
line is verified first, and every overlay is checked against the size and
SHA-256 the index records as it is copied. On the node:

  strata apply-overlay --root / --bundle B.tar

verifies the bundle as it would the repository (signatures, digests,
freshness: an index that expired before the bundle is applied is
refused, so refresh the repository before bundling for a slow courier).`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			st, err := repo.Locate(repoLoc)
			if err != nil {
				return err
			}
			r, err := repo.OpenStore(c.Context(), st, nil)
			if err != nil {
				return err
			}
			chain, err := repo.LoadChain(c.Context(), r, line, to, nil)
			if err != nil {
				return err
			}
			n, err := repo.WriteBundle(c.Context(), r, chain.Line.Name, from, to, out)
			if err != nil {
				return err
			}
			res := map[string]any{"bundle": out, "line": chain.Line.Name, "from": from, "to": chain.Head().Version, "overlays": n}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s: line %s, %d overlays after %s through %s\n", out, chain.Line.Name, n, from, chain.Head().Version)
			})
		},
	}
	c.Flags().StringVar(&repoLoc, "repo", "", "repository (directory or URL)")
	c.Flags().StringVar(&line, "line", "", "line (when the repository has several)")
	versionVar(c, &from, "from", "the node's head: the bundle holds the overlays after it (not it)")
	versionVar(c, &to, "to", "the last version to carry (default: the head)")
	c.Flags().StringVar(&out, "out", "", "bundle file to write")
	required(c, "repo", "from", "out")
	return c
}
