package main

import (
	"fmt"
	"io"
	"time"

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
	rc.AddCommand(init, newRepoRefreshCmd(g))
	return rc
}

func newRepoRefreshCmd(g *globals) *cobra.Command {
	var keyPath string
	var validFor time.Duration
	c := &cobra.Command{
		Use:   "refresh REPO --key K [--valid-for DURATION]",
		Short: "Re-sign the index with a higher serial and a new expiry",
		Long: `Re-sign the repository's index unchanged but for its serial (one higher)
and its expiry (--valid-for from now, default 720h). Nodes refuse an index
older than one they accepted and an expired one, so a repository that
publishes rarely must be refreshed more often than its validity (from cron,
say). The key must be the one that signed the index.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			if validFor <= 0 {
				return usageError{fmt.Errorf("--valid-for %s: want a positive duration such as 720h", validFor)}
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			r, err := repo.Refresh(a[0], key, validFor)
			if err != nil {
				return err
			}
			x := r.Index
			return g.output(c.OutOrStdout(), map[string]any{"repo": a[0], "serial": x.Serial, "expires": x.Expires}, func(w io.Writer) {
				fmt.Fprintf(w, "repository %s: index serial %d, expires %s\n", a[0], x.Serial, x.Expires)
			})
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "the key that signs the index")
	c.Flags().DurationVar(&validFor, "valid-for", repo.DefaultValidity, "how long the index stays current")
	required(c, "key")
	return c
}
