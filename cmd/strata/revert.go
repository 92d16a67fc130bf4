package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
)

func newOverlayRevertCmd(g *globals) *cobra.Command {
	var repoDir, keyPath string
	var o overlay.RevertOptions
	c := &cobra.Command{
		Use:   "revert --repo REPO V (--key K | --dry-run) [--version W] [--force]",
		Short: "Publish the next overlay, which undoes overlay V against the head",
		Long: `Withdraw a bad overlay the way a sequence allows: publish, as the line's
next overlay (--version, default the head's next patch), the change that
undoes V against the head. Every path V wrote goes back to what it was
before V (content, type, mode, owner), or is deleted if V created it;
every path V deleted comes back. The restart plan is computed as for any
overlay. When later overlays changed the same paths the revert is
refused, naming them (exit 3), unless --force, which sets those paths
back to what they were before V as well (what later overlays added below
a path V deleted stays). A key rotation is not reverted: publish the
opposite rotation with strata key rotate. --dry-run shows what would be
restored and deleted, needs no key, and publishes nothing.`,
		Example: `  strata overlay revert --repo repo 1.0.4 --key ci.key
  strata overlay revert --repo repo 1.0.4 --dry-run
  strata overlay revert --repo repo 1.0.4 --key ci.key --force --version 1.0.9`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			if err := versionArg(a[0]); err != nil {
				return err
			}
			if err := overlayVersion("--version", o.Version); err != nil {
				return err
			}
			var key *sign.Key
			switch {
			case keyPath != "":
				k, err := loadKey(keyPath)
				if err != nil {
					return err
				}
				key = k
			case !o.DryRun:
				return usageError{fmt.Errorf("--key is required to sign the revert (or --dry-run to see it first)")}
			}
			o.Progress = g.progress()
			rev, err := overlay.Revert(c.Context(), repoDir, a[0], key, o)
			if err != nil {
				return err
			}
			v := map[string]any{"revert": rev}
			if rev.Created != nil {
				v["path"], v["digest"], v["manifest"] = rev.Created.Path, rev.Created.Digest, rev.Created.Manifest
			}
			return g.output(c.OutOrStdout(), v, func(w io.Writer) {
				verb := "reverted"
				if o.DryRun {
					verb = "would revert (dry run)"
				}
				fmt.Fprintf(w, "%s %s as %s\n", verb, rev.Reverts.Version, rev.Version)
				if len(rev.Restores) > 0 {
					fmt.Fprintf(w, "  restores %s\n", strings.Join(rev.Restores, ", "))
				}
				if len(rev.Deletes) > 0 {
					fmt.Fprintf(w, "  deletes  %s\n", strings.Join(rev.Deletes, ", "))
				}
				if len(rev.Conflicts) > 0 {
					fmt.Fprintf(w, "  over later changes (--force): %s\n", strings.Join(rev.Conflicts, "; "))
				}
				if rev.Created != nil {
					fmt.Fprintf(w, "wrote %s\n", rev.Created.Path)
					printManifest(w, rev.Created.Manifest, rev.Created.Digest)
				}
				printValidation(w, rev.Validation)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&repoDir, "repo", "", "repository (a directory)")
	f.StringVar(&keyPath, "key", "", "signing key")
	f.StringVar(&o.Line, "line", "", "line (when the repository has several)")
	versionVar(c, &o.Version, "version", "version of the new overlay (default: the head's next patch)")
	f.BoolVar(&o.Force, "force", false, "revert over later overlays that changed the same paths")
	f.BoolVar(&o.DryRun, "dry-run", false, "show what would be restored and deleted; publish nothing")
	f.StringVar(&o.SkipValidation, "skip-validation", "", "REASON: publish without running the services' validation commands; the reason is signed into the overlay (nodes still validate)")
	required(c, "repo")
	return c
}
