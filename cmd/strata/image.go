package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// imageInfo is what strata image inspect reports.
type imageInfo struct {
	Image       string              `json:"image"`
	Line        string              `json:"line"`
	Version     string              `json:"version"`
	Created     string              `json:"created"`
	Recipe      string              `json:"recipe,omitempty"`
	Digest      string              `json:"digest"`
	TreeDigest  string              `json:"tree_digest"`
	KeyID       string              `json:"key_id"`
	Trusts      []string            `json:"trusts"`
	Hierarchies []string            `json:"hierarchies"`
	Compressor  string              `json:"compressor"`
	Files       int                 `json:"files"`
	Base        *manifests.Ref      `json:"base,omitempty"`
	Head        *manifests.Ref      `json:"head,omitempty"`
	Services    []manifests.Service `json:"services"`
}

func newImageCmd(g *globals) *cobra.Command {
	ic := &cobra.Command{Use: "image", Short: "Look at images"}
	var pub string
	c := &cobra.Command{
		Use:   "inspect IMAGE [--pub KEY.pub]",
		Short: "Show an image's line, version, digests, keys, hierarchies and service catalog",
		Long: `Show what an image's signed manifest says: line, version, tree digest, the
key that signed it and the keys it trusts, its managed hierarchies (where
overlays may write), and its service catalog: each unit with its unit
files, the programs it runs and the libraries they load, the paths that
restart or reload it and its validate and check commands. The signature
is verified (--pub: by that key; else by the keys the image lists, which
proves integrity, not origin). The squashfs itself is not read: provision
verifies every file against the manifest.`,
		Example: `  strata image inspect out/demo-1.0.0.squashfs
  strata image inspect out/demo-1.0.0.image.json --pub ci.pub
  strata --json image inspect out/demo-1.0.0.squashfs`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			trust, err := optionalPub(pub)
			if err != nil {
				return err
			}
			img := repo.ImageFile(a[0])
			im, err := repo.LoadImage(img, trust)
			if err != nil {
				return err
			}
			info, err := describeImage(img, im)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), info, func(w io.Writer) { printImageInfo(w, info) })
		},
	}
	c.Flags().StringVar(&pub, "pub", "", "public key the image must be signed with (default: the keys it lists)")
	ic.AddCommand(c)
	return ic
}

func describeImage(path string, im *repo.Image) (*imageInfo, error) {
	m := im.Manifest
	ks, err := im.Trust()
	if err != nil {
		return nil, err
	}
	info := &imageInfo{Image: path, Line: m.Line, Version: m.Version, Created: m.Created, Recipe: m.Recipe,
		Digest: im.Digest, TreeDigest: m.TreeDigest, KeyID: im.KeyID, Trusts: ks.IDs(),
		Hierarchies: m.Managed(), Compressor: m.Compressor, Files: len(m.Files),
		Base: m.Base, Head: m.Head, Services: m.Catalog.Services}
	if info.Services == nil {
		info.Services = []manifests.Service{}
	}
	return info, nil
}

func printImageInfo(w io.Writer, i *imageInfo) {
	fmt.Fprintf(w, "image      %s\nline       %s %s (created %s)\ndigest     %s\ntree       %s\n", i.Image, i.Line, i.Version, i.Created, i.Digest, i.TreeDigest)
	if i.Base != nil && i.Head != nil {
		fmt.Fprintf(w, "folds      image %s through overlay %s (regenerated)\n", i.Base.Version, i.Head.Version)
	}
	fmt.Fprintf(w, "signed by  %s\ntrusts     %s\n", i.KeyID, strings.Join(i.Trusts, ", "))
	h := "/" + strings.Join(i.Hierarchies, ", /")
	fmt.Fprintf(w, "managed    %s\nfiles      %d, %s\nservices   %d\n", h, i.Files, i.Compressor, len(i.Services))
	for _, s := range i.Services {
		fmt.Fprintf(w, "  %s\n", s.Unit)
		row := func(label string, items []string, abs bool) {
			if len(items) == 0 {
				return
			}
			if abs {
				items = absPaths(items)
			}
			fmt.Fprintf(w, "    %-11s %s\n", label, strings.Join(items, ", "))
		}
		row("unit files", s.UnitFiles, true)
		row("programs", s.Binaries, true)
		row("libraries", s.Libraries, true)
		row("restart on", s.Paths, true)
		row("reload on", s.ReloadPaths, true)
		row("validate", s.Validate, false)
		row("check", s.Check, false)
	}
}

func absPaths(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = "/" + strings.TrimPrefix(p, "/")
	}
	return out
}
