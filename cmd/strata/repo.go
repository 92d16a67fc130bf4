package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/repo"
)

func newRepoCmd(g *globals) *cobra.Command {
	rc := &cobra.Command{Use: "repo", Short: "Manage overlay repositories"}
	var image, keyPath string
	init := &cobra.Command{
		Use:   "init REPO --image IMAGE.squashfs --key K",
		Short: "Start a repository (or add a line to one) beginning at an image",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			r, err := repo.Init(a[0], image, key)
			if err != nil {
				return err
			}
			l := r.Index.Lines[len(r.Index.Lines)-1]
			return g.output(c.OutOrStdout(), map[string]any{"repo": a[0], "line": l.Name, "image": l.Image}, func(w io.Writer) {
				fmt.Fprintf(w, "repository %s: line %s starts at image %s (%s)\n", a[0], l.Name, l.Image.Version, l.Image.Digest)
			})
		},
	}
	init.Flags().StringVar(&image, "image", "", "the line's image (.squashfs with its .image.json beside it)")
	init.Flags().StringVar(&keyPath, "key", "", "key that signs the index; the image must trust it")
	required(init, "image", "key")
	rc.AddCommand(init)
	return rc
}
