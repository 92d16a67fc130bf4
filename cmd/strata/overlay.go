package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

func newOverlayCmd(g *globals) *cobra.Command {
	oc := &cobra.Command{Use: "overlay", Short: "Create, inspect and revert overlays"}
	oc.AddCommand(newOverlayCreateCmd(g), newOverlayInspectCmd(g), newOverlayRevertCmd(g))
	return oc
}

func newOverlayCreateCmd(g *globals) *cobra.Command {
	var repoDir, keyPath, treeDir string
	var modes, owners []string
	var adds []string
	var dryRun bool
	var ch overlay.Change
	var o overlay.CreateOptions
	c := &cobra.Command{
		Use: "create --repo REPO --version V (--key K | --dry-run) (--tree DIR | --add DEST=SRC ... [--mode M] [--owner U:G] | --delete DEST ...)",
		Example: `  strata overlay create --repo repo --version 1.0.1 --key ci.key --add /etc/demo/web.conf=web.conf
  strata overlay create --repo repo --version 1.1.0 --key ci.key --tree changes/ --delete /etc/demo/old.conf
  strata overlay create --repo repo --version 1.0.2 --key ci.key --add /etc/motd=motd --restart demo-web.service
  strata overlay create --repo repo --version 1.0.3 --dry-run --add /etc/app/token=token --mode 0600 --owner root:ssl-cert
  strata overlay create --repo repo --version 1.0.4 --key ci.key --add /etc/a.conf=a.conf --add /etc/b.key=b.key --mode /etc/b.key=0600`,
		Short: "Compute a change against the line's head, sign it and append it to the repository",
		Long: `Create an overlay. --tree DIR lays a directory over the head (entries that
differ, with their on-disk owners and modes; directories the head already
has keep theirs); --add places one file or
directory (a path the head has keeps its owner and mode; new paths are
root-owned 0644/0755; --mode sets the mode of the files an --add places,
--owner the owner of everything it places: a bare value for every --add,
DEST=VALUE for the --add of DEST; owners are numbers or names, resolved
with the /etc/passwd and /etc/group of the line's head, as the nodes
will, never the host's); --delete removes a path.
The services to restart or reload are inferred from the line's catalog;
--restart and --reload add more. --dry-run shows the change against the
head (added, modified with what differs: content, mode, owner, type;
deleted) and the restart plan before anything is signed; it needs no key.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := overlayVersion("--version", o.Version); err != nil {
				return err
			}
			if o.RequiresImage != "" {
				if _, err := manifests.ParseConstraint(o.RequiresImage); err != nil {
					return usageError{fmt.Errorf("--requires-image %q: want a semver constraint such as ^1.0.0 or >=1.2.0, <2.0.0", o.RequiresImage)}
				}
			}
			if treeDir == "" && len(adds) == 0 && len(ch.Deletes) == 0 {
				return usageError{fmt.Errorf("nothing to do: give --tree, --add or --delete")}
			}
			if _, err := compress.Parse(o.Compression); err != nil {
				return usageError{err}
			}
			if treeDir != "" {
				if err := checkTreeDir(treeDir); err != nil {
					return err
				}
			}
			ch.Tree = treeDir
			for _, a := range adds {
				add, err := parseAdd(a)
				if err != nil {
					return err
				}
				ch.Adds = append(ch.Adds, add)
			}
			for _, d := range ch.Deletes {
				if err := checkImagePath("--delete", d); err != nil {
					return err
				}
			}
			if err := checkAddsDeletes(ch.Adds, ch.Deletes); err != nil {
				return err
			}
			if err := setModesOwners(ch.Adds, modes, owners); err != nil {
				return err
			}
			o.Progress = g.progress()
			if dryRun {
				p, err := overlay.Preview(c.Context(), repoDir, ch, o)
				if err != nil {
					return err
				}
				return g.output(c.OutOrStdout(), map[string]any{"dry_run": true, "changes": p.Changes, "manifest": p.Manifest, "validation": p.Validation}, func(w io.Writer) {
					printPreview(w, p.Manifest, p.Changes)
					printValidation(w, p.Validation)
				})
			}
			if keyPath == "" {
				return usageError{fmt.Errorf("--key is required to sign the overlay (or --dry-run to see it first)")}
			}
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			res, err := overlay.Create(c.Context(), repoDir, key, ch, o)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), map[string]any{"path": res.Path, "digest": res.Digest, "manifest": res.Manifest, "validation": res.Validation}, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s\n", res.Path)
				printManifest(w, res.Manifest, res.Digest)
				printValidation(w, res.Validation)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&repoDir, "repo", "", "repository")
	versionVar(c, &o.Version, "version", "overlay version (strict semver, greater than the head)")
	f.StringVar(&keyPath, "key", "", "signing key")
	f.StringVar(&o.Line, "line", "", "line (when the repository has several)")
	f.StringVar(&treeDir, "tree", "", "directory laid over the head")
	f.StringArrayVar(&adds, "add", nil, "DEST=SRC: place host file or directory SRC at image path DEST")
	f.StringArrayVar(&ch.Deletes, "delete", nil, "image path to delete")
	f.StringArrayVar(&ch.Restart, "restart", nil, "unit to restart in addition to the inferred plan")
	f.StringArrayVar(&ch.Reload, "reload", nil, "unit to reload in addition to the inferred plan")
	f.BoolVar(&dryRun, "dry-run", false, "show the change against the head and the restart plan; sign and write nothing")
	f.StringArrayVar(&modes, "mode", nil, "with --add: octal mode of the files added (0600), or DEST=MODE for one --add")
	f.StringArrayVar(&owners, "owner", nil, "with --add: USER:GROUP owning what is added, numbers or the image's names (0:113, www-data:www-data), or DEST=USER:GROUP for one --add")
	f.BoolVar(&ch.AllowUnknownUnits, "allow-unknown-unit", false, "let --restart and --reload name units the line's catalog does not have")
	f.StringVar(&o.Compression, "compression", "zstd", "zstd, xz, gzip or none")
	f.StringVar(&o.RequiresImage, "requires-image", "", "semver constraint on the base image (default ^IMAGE_VERSION)")
	f.StringVar(&o.SkipValidation, "skip-validation", "", "REASON: publish without running the validation commands of the services the change restarts or reloads; the reason is signed into the overlay (nodes still validate)")
	required(c, "repo", "version")
	return c
}

// printPreview shows a dry run of overlay create.
func printPreview(w io.Writer, m *manifests.OverlayManifest, changes []overlay.PathChange) {
	fmt.Fprintf(w, "would create %s %s (parent %s); nothing signed or written\n", m.Line, m.Version, m.Parent.Version)
	for _, ch := range changes {
		what := ""
		if len(ch.What) > 0 {
			what = ": " + strings.Join(ch.What, ", ")
		}
		fmt.Fprintf(w, "  %-9s %s%s\n", ch.Kind, ch.Path, what)
	}
	if len(m.Services) == 0 {
		fmt.Fprintln(w, "services: none affected")
	} else {
		fmt.Fprintf(w, "services (%d):\n", len(m.Services))
		printActions(w, m.Services)
	}
	if len(m.Unclaimed) > 0 {
		fmt.Fprintf(w, "unclaimed (restart nothing): /%s\n", strings.Join(m.Unclaimed, ", /"))
	}
}

func newOverlayInspectCmd(g *globals) *cobra.Command {
	var pub string
	c := &cobra.Command{
		Use:     "inspect FILE [--json]",
		Example: `  strata overlay inspect repo/overlays/demo-1.0.1.overlay.tar.zst --pub ci.pub`,
		Short:   "Show an overlay's manifest (verifying it when --pub is given)",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			var trust *sign.KeySet
			var err error
			if pub != "" {
				if trust, err = sign.LoadPublicFile(pub); err != nil {
					return err
				}
			} else {
				trust = sign.AnyKey()
			}
			ar, err := overlay.Open(a[0], trust)
			if err != nil {
				return err
			}
			if pub != "" {
				if err := ar.Verify(c.Context()); err != nil {
					return err
				}
			}
			return g.output(c.OutOrStdout(), map[string]any{"path": a[0], "digest": ar.Digest, "key_id": ar.KeyID, "verified": pub != "", "manifest": ar.Manifest}, func(w io.Writer) {
				printManifest(w, ar.Manifest, ar.Digest)
				if pub == "" {
					fmt.Fprintf(w, "signature: key %s (not checked; pass --pub to verify signature and payload)\n", ar.KeyID)
				} else {
					fmt.Fprintf(w, "signature: good, key %s; payload verified\n", ar.KeyID)
				}
			})
		},
	}
	c.Flags().StringVar(&pub, "pub", "", "public key to verify the signature and payload against")
	return c
}

// printValidation shows what the services' validation commands said of a
// change.
func printValidation(w io.Writer, v *overlay.Validation) {
	switch {
	case v == nil:
	case v.Skipped != "":
		fmt.Fprintf(w, "validation: skipped (%s)\n", v.Skipped)
	case len(v.Validated) == 0:
		fmt.Fprintln(w, "validation: no service the change restarts or reloads declares a validate command")
	default:
		fmt.Fprintf(w, "validation: passed (%d):\n", len(v.Validated))
		for _, s := range v.Validated {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
}

func printManifest(w io.Writer, m *manifests.OverlayManifest, digest string) {
	fmt.Fprintf(w, "overlay   %s %s\ndigest    %s\nparent    %s (%s)\nrequires  image %s\ncreated   %s\ntree      %s\n",
		m.Line, m.Version, digest, m.Parent.Version, m.Parent.Digest, m.Requires.Image, m.Created, m.TreeDigest)
	fmt.Fprintf(w, "files (%d):\n", len(m.Entries))
	for _, e := range m.Entries {
		extra := ""
		switch e.Type {
		case manifests.TypeFile:
			extra = fmt.Sprintf(" %d bytes sha256:%.12s", e.Size, e.SHA256)
			if p, ok := m.PatchFor(e.Path); ok {
				extra += fmt.Sprintf(" (patch of %d bytes against sha256:%.12s)", p.Size, p.Base)
			}
		case manifests.TypeSymlink:
			extra = " -> " + e.Target
		}
		fmt.Fprintf(w, "  %-7s %04o %d:%d /%s%s\n", e.Type, uint32(e.Mode), e.UID, e.GID, e.Path, extra)
	}
	fmt.Fprintf(w, "deletes (%d):\n", len(m.Deletes))
	for _, d := range m.Deletes {
		fmt.Fprintf(w, "  /%s\n", d)
	}
	fmt.Fprintf(w, "services (%d):\n", len(m.Services))
	printActions(w, m.Services)
	if len(m.Unclaimed) > 0 {
		fmt.Fprintf(w, "unclaimed (restart nothing): /%s\n", strings.Join(m.Unclaimed, ", /"))
	}
	if m.Catalog != nil {
		fmt.Fprintf(w, "catalog: updated (%d services)\n", len(m.Catalog.Services))
	}
	if m.ValidationSkipped != "" {
		fmt.Fprintf(w, "validation skipped by the publisher: %s\n", m.ValidationSkipped)
	}
	if r := m.Reverts; r != nil {
		fmt.Fprintf(w, "reverts   %s (%s)\n", r.Version, r.Digest)
	}
	if m.Keys != nil {
		fmt.Fprintln(w, "key rotation:")
		for _, pub := range m.Keys.Add {
			id, _ := manifests.KeyID(pub)
			fmt.Fprintf(w, "  trust   %s %s\n", id, pub)
		}
		for _, id := range m.Keys.Revoke {
			fmt.Fprintf(w, "  revoke  %s\n", id)
		}
	}
}

func printActions(w io.Writer, as []manifests.ServiceAction) {
	for _, a := range as {
		dr := ""
		if a.DaemonReload {
			dr = " (after daemon-reload)"
		}
		fmt.Fprintf(w, "  %-7s %s%s because %s\n", a.Action, a.Unit, dr, strings.Join(becauseText(a.Because), ", "))
	}
}

// becauseText shows the reasons of an action: changed paths absolute, as
// on the command line; flags (--restart) as they are.
func becauseText(because []string) []string {
	out := make([]string, len(because))
	for i, b := range because {
		if strings.HasPrefix(b, "--") {
			out[i] = b
		} else {
			out[i] = "/" + b
		}
	}
	return out
}
