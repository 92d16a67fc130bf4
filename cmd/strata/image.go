package main

import (
	"errors"
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
	// Verity is the image's signed dm-verity record; nil for an image
	// built before strata wrote them.
	Verity *manifests.Verity `json:"verity"`
	// Verified is set by --verify: every block of the image was read and
	// matched the record's root hash.
	Verified bool `json:"verified,omitempty"`
}

func newImageCmd(g *globals) *cobra.Command {
	ic := &cobra.Command{Use: "image", Short: "Look at images"}
	var pub string
	var check bool
	c := &cobra.Command{
		Use:   "inspect IMAGE [--pub KEY.pub] [--verify]",
		Short: "Show an image's line, version, digests, dm-verity root hash, keys, hierarchies and service catalog",
		Long: `Show what an image's signed manifest says: line, version, tree digest, the
key that signed it and the keys it trusts, its managed hierarchies (where
overlays may write), and its service catalog: each unit with its unit
files, the programs it runs and the libraries they load, the paths that
restart or reload it and its validate and check commands, and the
image's dm-verity record (<line>-<version>.verity.json beside it): the
root hash, salt and block counts with which the kernel or veritysetup
opens the image as a verified device. Both signatures are verified
(--pub: by that key; else by the keys the image lists, which proves
integrity, not origin). The squashfs itself is read only with --verify,
which checks every block of it and its hash tree against the root hash,
as dm-verity does, and names the first block that does not match.`,
		Example: `  strata image inspect out/demo-1.0.0.squashfs
  strata image inspect out/demo-1.0.0.image.json --pub ci.pub --verify
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
			v, err := repo.LoadVerity(img, im, trust)
			switch {
			case err == nil:
				info.Verity = v
			case errors.Is(err, repo.ErrNoVerity) && !check:
			default:
				return err
			}
			if check {
				if err := repo.VerifyTree(c.Context(), img, v); err != nil {
					return err
				}
				info.Verified = true
			}
			return g.output(c.OutOrStdout(), info, func(w io.Writer) { printImageInfo(w, info) })
		},
	}
	c.Flags().StringVar(&pub, "pub", "", "public key the image must be signed with (default: the keys it lists)")
	c.Flags().BoolVar(&check, "verify", false, "read the whole image and check it against its dm-verity root hash")
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
	if v := i.Verity; v != nil {
		fmt.Fprintf(w, "verity     root hash %s\n           salt %s\n           %d data blocks of %d bytes, tree at byte %d\n", v.RootHash, v.Salt, v.DataBlocks, v.DataBlockSize, v.HashOffset)
		if i.Verified {
			fmt.Fprintf(w, "           verified: every block matches the root hash\n")
		}
	} else {
		fmt.Fprintf(w, "verity     none: the image has no verity record (built before strata wrote them); rebuild it to open it as a verified device\n")
	}
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
