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
		Use:     "init REPO --image IMAGE.squashfs --key K",
		Example: `  strata repo init repo --image out/demo-1.0.0.squashfs --key ci.key`,
		Short:   "Start a repository (or add a line to one) beginning at an image",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			r, err := repo.Init(c.Context(), a[0], image, key)
			if err != nil {
				return err
			}
			l := r.Index.Lines[len(r.Index.Lines)-1]
			return g.output(c.OutOrStdout(), map[string]any{"repo": a[0], "line": l.Name, "image": l.Image}, func(w io.Writer) {
				fmt.Fprintf(w, "repository %s: line %s starts at image %s (%s)\n", a[0], l.Name, l.Image.Version, l.Image.Digest)
			})
		},
	}
	imageVar(init.Flags(), &image, "the line's image (.squashfs with its .image.json beside it)")
	init.Flags().StringVar(&keyPath, "key", "", "key that signs the index; the image must trust it")
	required(init, "image", "key")
	rc.AddCommand(init, newRepoAddImageCmd(g), newRepoLogCmd(g), newRepoRefreshCmd(g), newRepoPushCmd(g))
	return rc
}

func newRepoAddImageCmd(g *globals) *cobra.Command {
	var image, bootImage, keyPath string
	c := &cobra.Command{
		Use:   "add-image REPO --image IMAGE.squashfs [--boot-image FILE.efi] --key K",
		Short: "Publish a later whole image of a line, for nodes to upgrade to",
		Long: `Publish an image of one of the repository's lines for strata upgrade
--repo: an image of a newer recipe version than the line's image and its
other images (a new kernel, a distribution update), or the line's
regenerated image through one of its overlays (strata regenerate), which
nodes at that overlay compact onto (strata upgrade --compact --repo). The
image must be signed by a key the line trusts at its head and trust the
key that signs the index. The line's own image and its overlays do not
change: the sequence goes on, and nodes that upgrade keep their place in
it.

--boot-image publishes the image's boot image with it (strata secure-boot
sign-image: a unified kernel image signed for Secure Boot that boots it
on any node of the line), as images/LINE-VERSION.SHA.efi, which the index
names with its size and SHA-256. Nodes that boot signed kernel images
upgrade themselves with it (strata upgrade --repo). It must be signed
and boot exactly the image's signed root hash. For an image published
already, --boot-image publishes or replaces its boot image alone (after
a db key rotation, say).`,
		Example: `  strata repo add-image repo/ --image out/base-1.1.0.squashfs --key ci.key
  strata secure-boot sign-image --image out/base-1.2.0.squashfs --secure-boot-key db.key --secure-boot-cert db.crt
  strata repo add-image repo/ --image out/base-1.2.0.squashfs --boot-image out/base-1.2.0.efi --key ci.key
  strata regenerate --repo repo/ --out out/ --key ci.key
  strata repo add-image repo/ --image out/base-1.0.0+head.1.0.7.squashfs --key ci.key`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			ref, err := repo.AddImageBoot(c.Context(), a[0], image, bootImage, key)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), map[string]any{"repo": a[0], "image": ref}, func(w io.Writer) {
				what := "image " + ref.Version
				if ref.Head != nil {
					what = "regenerated image " + ref.Version + " (through " + ref.Head.Version + ")"
				}
				fmt.Fprintf(w, "repository %s: %s published as %s (%s)\n", a[0], what, ref.File, ref.Digest)
				if ref.Boot != nil {
					fmt.Fprintf(w, "  boot image %s (%d bytes, sha256 %s)\n", ref.Boot.File, ref.Boot.Size, ref.Boot.SHA256)
				}
			})
		},
	}
	imageVar(c.Flags(), &image, "the image (.squashfs with its signed .image.json beside it)")
	c.Flags().StringVar(&bootImage, "boot-image", "", "the image's boot image (strata secure-boot sign-image), published with it")
	c.Flags().StringVar(&keyPath, "key", "", "key that signs the index")
	required(c, "image", "key")
	return c
}

func newRepoRefreshCmd(g *globals) *cobra.Command {
	var keyPath string
	var validFor time.Duration
	var serial uint64
	c := &cobra.Command{
		Use: "refresh REPO --key K [--valid-for DURATION] [--serial N]",
		Example: `  strata repo refresh repo --key ci.key
  strata repo refresh repo --key ci.key --valid-for 168h`,
		Short: "Re-sign the index with a higher serial and a new expiry",
		Long: `Re-sign the repository's index unchanged but for its serial (one higher)
and its expiry (--valid-for from now, default 720h). Nodes refuse an index
older than one they accepted and an expired one, so a repository that
publishes rarely must be refreshed more often than its validity (from cron,
say). The key must be the one that signed the index. --serial N sets the
new serial (above the current one): after a compromised key signed an
index with a serial ahead of yours, publish past it (docs/security.md).`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			if validFor <= 0 {
				return usageError{fmt.Errorf("--valid-for %s: want a positive duration such as 720h", validFor)}
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			r, err := repo.RefreshTo(c.Context(), a[0], key, validFor, serial)
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
	c.Flags().Uint64Var(&serial, "serial", 0, "the new index's serial, above the current one (default: one higher)")
	required(c, "key")
	return c
}

func newRepoPushCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "push REPO oci://REGISTRY/NAME[:TAG]",
		Example: `  strata repo push repo oci://registry.example.net/strata/demo:stable`,
		Short:   "Publish a repository directory to an OCI registry (one artifact, tagged)",
		Long: `Push the repository in directory REPO to an OCI registry: every member its
signed index names (images, image manifests, overlays, the index and
signatures) as a blob the registry does not have yet, then one artifact
(artifact type ` + repo.ArtifactType + `) listing them, then the tag
(default latest). Nodes read it with --repo oci://REGISTRY/NAME[:TAG].

A loopback registry is spoken to over plain HTTP, any other over TLS;
oci+http://... forces plain HTTP. Credentials come from docker login
(~/.docker/config.json).`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			desc, err := repo.Push(c.Context(), a[0], a[1], g.progress())
			if err != nil {
				return err
			}
			res := map[string]any{"reference": a[1], "digest": desc.Digest.String(), "size": desc.Size}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) {
				fmt.Fprintf(w, "pushed %s to %s (%s)\n", a[0], a[1], desc.Digest)
			})
		},
	}
}
