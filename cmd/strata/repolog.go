package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/overlay"
)

func newRepoLogCmd(g *globals) *cobra.Command {
	var line, pub string
	c := &cobra.Command{
		Use:   "log REPO [--line L] [--pub KEY.pub]",
		Short: "List each line's image, overlays and upgrade images, oldest first",
		Long: `List what a repository (a directory or URL) holds, line by line, oldest
first: the line's image, each overlay (version, created, signing key,
files written and deleted, the restarts and reloads it plans, its image
constraint, key rotations) and the later images published for upgrades.
Each manifest is checked against its digest in the signed index and its
signature, as the line's key rotations change the keys (--pub: trust only
that key, else the keys each line's image lists). Payloads are not read:
strata verify-sequence --repo audits those.`,
		Example: `  strata repo log repo
  strata --json repo log https://repo.example/base --line base`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			trust, err := optionalPub(pub)
			if err != nil {
				return err
			}
			lg, err := overlay.Log(c.Context(), a[0], line, trust)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), lg, func(w io.Writer) { printRepoLog(w, lg) })
		},
	}
	c.Flags().StringVar(&line, "line", "", "only this line")
	c.Flags().StringVar(&pub, "pub", "", "public key the index and manifests must be signed with (default: the keys the images list)")
	return c
}

func printRepoLog(w io.Writer, lg *overlay.RepoLog) {
	fmt.Fprintf(w, "repository %s: index serial %d, signed by %s, expires %s\n", lg.Repo, lg.Serial, lg.KeyID, lg.Expires)
	for _, l := range lg.Lines {
		fmt.Fprintf(w, "\nline %s, head %s\n", l.Line, l.Head.Version)
		for _, e := range l.Entries {
			key := e.KeyID
			if key == "" {
				key = "unsigned"
			}
			fmt.Fprintf(w, "  %-13s %-16s %s  %s  %s\n", e.Kind, e.Version, e.Created, key, logSummary(e))
		}
	}
}

func logSummary(e overlay.LogEntry) string {
	if e.Kind != "overlay" {
		s := fmt.Sprintf("%d files", e.Files)
		if e.Head != nil {
			s += ", regenerated through " + e.Head.Version
		}
		return s
	}
	parts := []string{fmt.Sprintf("%d written, %d deleted", e.Files, e.Deletes)}
	if e.Rotation {
		parts = append(parts, "key rotation")
	}
	if e.Reverts != "" {
		parts = append(parts, "reverts "+e.Reverts)
	}
	var acts []string
	for _, s := range e.Services {
		acts = append(acts, string(s.Action)+" "+s.Unit)
	}
	if len(acts) > 0 {
		parts = append(parts, strings.Join(acts, ", "))
	} else {
		parts = append(parts, "no restarts")
	}
	parts = append(parts, "requires image "+e.Requires)
	if e.ValidationSkipped != "" {
		parts = append(parts, "validation skipped: "+strconv.Quote(e.ValidationSkipped))
	}
	return strings.Join(parts, "; ")
}
