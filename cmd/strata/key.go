package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/sign"
)

func newKeyCmd(g *globals) *cobra.Command {
	key := &cobra.Command{Use: "key", Short: "Manage minisign signing keys"}
	var out string
	gen := &cobra.Command{
		Use:   "generate --out PREFIX",
		Short: "Write a new key pair to PREFIX.key and PREFIX.pub (minisign format, no password)",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := sign.Generate(out); err != nil {
				return err
			}
			k, err := sign.LoadKey(out + ".key")
			if err != nil {
				return err
			}
			res := map[string]string{"key": out + ".key", "pub": out + ".pub", "id": k.ID()}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s.key and %s.pub (key id %s)\n", out, out, k.ID())
			})
		},
	}
	gen.Flags().StringVar(&out, "out", "", "path prefix of the key files")
	required(gen, "out")
	key.AddCommand(gen)
	return key
}

// loadKey loads --key when set.
func loadKey(path string) (*sign.Key, error) {
	if path == "" {
		return nil, nil
	}
	return sign.LoadKey(path)
}
