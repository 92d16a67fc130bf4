package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

func newVerifyCmd(g *globals) *cobra.Command {
	var root, repoDir, pub, diskPath string
	var historyPubs []string
	var files, strict bool
	c := &cobra.Command{
		Use: "verify-sequence ((--root DIR | --disk DISK) [--repo REPO] [--files] | --repo REPO) [--json]",
		Example: `  strata verify-sequence --root / --repo https://repo.example.net/strata/ --files
  strata verify-sequence --repo repo --pub ci.pub
  strata verify-sequence --disk node.img --files`,
		Short: "Audit a node or a repository: no gaps, no reorders, no tampering, no drift",
		Long: `Audit a node (--root) or a repository (--repo alone).

A node audit checks the ledger's hash chain, the manifests of the overlays in
effect and their parent links; with --repo, that the node's sequence is the
repository's signed sequence (no gaps, no unknown or altered overlays) and how
far behind the head it is; with --files, every file of the tree against the
expected state, naming each one that drifted. Pending restarts are listed.

With --pub KEY the audit trusts only that key: the node's image and overlay
manifests and the repository index must be signed with it (root on a node
can replace the keys the node carries, but not forge signatures), as the
line's key rotations change it. --history-pub OLD adds keys that verify
the image and overlays only, never the index: after a rotation that
revoked a compromised key, audit with --pub NEW --history-pub OLD.

--disk audits the node on a provisioned disk that is not running (a disk
image file or a block device that is not mounted), mounted and activated
the way it boots, in a private mount namespace.

A repository audit checks every signature, digest, parent link, version
order, folded tree digest and image constraint.

Problems exit 3. Warnings (behind the head, pending restarts) exit 0 unless
--strict.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			var a *schema.Audit
			var err error
			switch {
			case root != "" && diskPath != "":
				return usageError{fmt.Errorf("give --root DIR or --disk DISK, not both")}
			case pub == "" && len(historyPubs) > 0:
				return usageError{fmt.Errorf("--history-pub needs --pub: the key that signs the index now")}
			case diskPath != "":
				trust, history, perr := auditorKeys(pub, historyPubs)
				if perr != nil {
					return perr
				}
				var ran bool
				if a, ran, err = verifyDisk(c, diskPath, node.VerifyOptions{Repo: repoDir, Files: files, Trust: trust, History: history}); ran {
					return err
				}
			case root != "":
				trust, history, perr := auditorKeys(pub, historyPubs)
				if perr != nil {
					return perr
				}
				var n *node.Node
				if n, err = node.Open(root, node.Options{}); err == nil {
					a, err = n.Verify(c.Context(), node.VerifyOptions{Repo: repoDir, Files: files, Trust: trust, History: history})
				}
			case repoDir != "":
				trust, history, perr := auditorKeys(pub, historyPubs)
				if perr != nil {
					return perr
				}
				a, err = overlay.VerifyRepoAs(c.Context(), repoDir, trust, history)
			default:
				return usageError{fmt.Errorf("give --root DIR, --disk DISK or --repo REPO")}
			}
			if err != nil {
				return err
			}
			if err := g.output(c.OutOrStdout(), a, func(w io.Writer) { printAudit(w, a, strict) }); err != nil {
				return err
			}
			if !a.OK() || (strict && len(a.Findings) > 0) {
				return auditFailed{fmt.Errorf("verification failed")}
			}
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&diskPath, "disk", "", "provisioned disk (image file or block device) of a node that is not running")
	c.Flags().StringVar(&repoDir, "repo", "", "repository")
	c.Flags().StringVar(&pub, "pub", "", "auditor's public key: manifests, index and images must be signed with it (default: the keys the node or images carry)")
	c.Flags().StringArrayVar(&historyPubs, "history-pub", nil, "repeatable; a public key that verifies the image and overlays only, never the index (a key a rotation revoked)")
	c.Flags().BoolVar(&files, "files", false, "recompute the tree digest and name every drifted file")
	c.Flags().BoolVar(&strict, "strict", false, "treat warnings (behind, pending restarts) as failures")
	return c
}

// auditorKeys loads --pub and --history-pub.
func auditorKeys(pub string, history []string) (*sign.KeySet, *sign.KeySet, error) {
	trust, err := optionalPub(pub)
	if err != nil || len(history) == 0 {
		return trust, nil, err
	}
	hs, err := loadPubs(history)
	return trust, hs, err
}

// loadPubs loads public key files into one set.
func loadPubs(paths []string) (*sign.KeySet, error) {
	ks := &sign.KeySet{}
	for _, p := range paths {
		if err := ks.Merge(sign.LoadPublicFile(p)); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

func printAudit(w io.Writer, a *schema.Audit, strict bool) {
	if a.Root != "" {
		fmt.Fprintf(w, "node      %s\n", a.Root)
	}
	if a.Repo != "" {
		fmt.Fprintf(w, "repo      %s\n", a.Repo)
	}
	if a.Line != "" {
		fmt.Fprintf(w, "line      %s\n", a.Line)
	}
	if a.Head != nil {
		fmt.Fprintf(w, "head      %s (%s)\n", a.Head.Version, a.Head.Digest)
	}
	if a.RepoHead != nil {
		fmt.Fprintf(w, "repo head %s (%s)\n", a.RepoHead.Version, a.RepoHead.Digest)
	}
	if a.Root != "" && a.Repo != "" {
		fmt.Fprintf(w, "behind    %d\n", a.Behind)
	}
	if a.FilesChecked && a.TreeDigest != "" {
		fmt.Fprintf(w, "tree      %s (files checked)\n", a.TreeDigest)
	}
	for _, f := range a.Findings {
		fmt.Fprintf(w, "%-8s %-15s %s\n", f.Severity, f.Kind, f.Message)
	}
	switch {
	case !a.OK():
		fmt.Fprintln(w, "FAILED: problems found")
	case strict && len(a.Findings) > 0:
		fmt.Fprintln(w, "FAILED: warnings are failures with --strict")
	default:
		fmt.Fprintln(w, "OK: sequence verified")
	}
}

func newRegenerateCmd(g *globals) *cobra.Command {
	return regenerateCmd(g)
}
