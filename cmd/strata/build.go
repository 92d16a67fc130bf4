package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder"
)

func newBuildImageCmd(g *globals) *cobra.Command {
	var out, keyPath, cache string
	var unsigned bool
	c := &cobra.Command{
		Use:   "build-image RECIPE --out DIR (--key K | --unsigned)",
		Short: "Build DIR/<line>-<version>.squashfs and its signed manifest from a recipe",
		Long: `Build a read-only root image from a recipe. The tree streams as a
deterministic tar into mksquashfs, so two builds of the same recipe are
byte-identical. $SOURCE_DATE_EPOCH overrides the recipe's epoch.

The image's manifest is signed with --key and the image trusts its public
half. --unsigned builds one without a signature (to look at, to test a
recipe): provision and repo init refuse it until it is signed. An image
of the same line and version that is in --out already is replaced only
by a build with the same manifest (a reproducible rebuild): one version
names one content.`,
		Example: `  strata build-image images/demo/recipe.yaml --out out --key ci.key
  SOURCE_DATE_EPOCH=1767225600 strata build-image recipe.yaml --out out --key ci.key
  strata build-image recipe.yaml --out /tmp/try --unsigned`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			if keyPath == "" && !unsigned {
				return usageError{fmt.Errorf("no --key: give --key K to sign the image, or --unsigned to build one that provision and repo init refuse until it is signed")}
			}
			if keyPath != "" && unsigned {
				return usageError{fmt.Errorf("--key and --unsigned exclude each other")}
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			opts := []builder.Option{builder.WithKey(key), builder.WithProgress(g.progress()), builder.WithFraction(g.fraction())}
			if cache == "" {
				cache = os.Getenv("STRATA_CACHE")
			}
			if cache != "" {
				opts = append(opts, builder.WithCacheDir(cache))
			}
			if s, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
				sec, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return usageError{fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number", s)}
				}
				opts = append(opts, builder.WithEpoch(sec))
			}
			res, err := builder.Build(c.Context(), a[0], out, opts...)
			if err != nil {
				return err
			}
			return printImage(g, c.OutOrStdout(), res)
		},
	}
	c.Flags().StringVar(&out, "out", "", "output directory")
	c.Flags().StringVar(&keyPath, "key", "", "signing key (minisign .key); the image trusts its public half")
	c.Flags().BoolVar(&unsigned, "unsigned", false, "build without a signature (the image cannot be provisioned as is)")
	c.Flags().StringVar(&cache, "cache", "", "cache for debootstrap bases and run steps (default $STRATA_CACHE or /var/cache/strata)")
	required(c, "out")
	return c
}

func printImage(g *globals, w io.Writer, res *builder.Result) error {
	m := res.ManifestData
	v := map[string]any{"image": res.Image, "manifest": res.Manifest, "digest": res.Digest, "line": m.Line,
		"version": m.Version, "tree_digest": m.TreeDigest, "files": len(m.Files), "services": len(m.Catalog.Services)}
	if m.Head != nil {
		v["head"] = m.Head
	}
	return g.output(w, v, func(w io.Writer) {
		fmt.Fprintf(w, "image    %s\nmanifest %s\nline     %s %s\ndigest   %s\ntree     %s\nfiles    %d, services %d\n",
			res.Image, res.Manifest, m.Line, m.Version, res.Digest, m.TreeDigest, len(m.Files), len(m.Catalog.Services))
		if m.Head != nil {
			fmt.Fprintf(w, "head     %s (%s)\n", m.Head.Version, m.Head.Digest)
		}
	})
}
