package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
)

func newProvisionCmd(g *globals) *cobra.Command {
	var image, root, pub, diskPath, size, keyFile, repoDir, line, through, signKey string
	var do builder.DiskOptions
	c := &cobra.Command{
		Use:   "provision (--image IMAGE.squashfs | --repo REPO [--through V] --key K) (--root DIR | --disk PATH [--size SIZE] [--hostname H] [--ssh-authorized-key FILE] [--node-id ID])",
		Short: "Make a directory node or a bootable node disk from a signed image",
		Long: `Provision a node from a signed image, verified first (signature, then every
entry and file against the manifest).

--root DIR makes a directory node. --disk PATH writes a GPT disk, a raw image
file (created, or replaced when complete) or a block device (refused when it
or a partition of it is mounted): an EFI system partition with systemd-boot
(and the image's kernel and initrd, if it has them), root A holding the
image, an empty root B of the same size and an ext4 state partition with the
ledger and the node identity. --size (e.g. 4G) defaults to the smallest
layout with 1 GiB of state for a file, the whole device for a block device.
See docs/images.md, "Disk images".

--repo REPO instead of --image provisions at the line's head (or at
--through V): the line's image when no overlay follows it, otherwise a fresh
image regenerated with the chain folded in and signed with --key, so the new
machine joins the sequence at its head.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if (root == "") == (diskPath == "") {
				return usageError{fmt.Errorf("give --root DIR or --disk PATH (not both)")}
			}
			if diskPath == "" && (size != "" || keyFile != "" || do.Hostname != "" || do.NodeID != "") {
				return usageError{fmt.Errorf("--size, --hostname, --ssh-authorized-key and --node-id need --disk")}
			}
			if (image == "") == (repoDir == "") {
				return usageError{fmt.Errorf("give --image IMAGE or --repo REPO (not both)")}
			}
			if repoDir == "" && (through != "" || line != "") {
				return usageError{fmt.Errorf("--through and --line need --repo")}
			}
			trust, err := optionalPub(pub)
			if err != nil {
				return err
			}
			if repoDir != "" {
				key, err := loadKey(signKey)
				if err != nil {
					return err
				}
				work, err := os.MkdirTemp("", "strata-provision-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(work)
				if image, err = builder.HeadImage(c.Context(), repoDir, line, through, work, key, builder.WithProgress(g.progress())); err != nil {
					return err
				}
			}
			if root != "" {
				e, err := builder.Provision(c.Context(), image, root, trust, builder.WithProgress(g.progress()))
				if err != nil {
					return err
				}
				return g.output(c.OutOrStdout(), e, func(w io.Writer) {
					fmt.Fprintf(w, "provisioned %s: line %s image %s head %s tree %s\n", root, e.Line, e.Version, e.Head.Version, e.TreeDigest)
				})
			}
			if size != "" {
				if do.Size, err = builder.ParseSize(size); err != nil {
					return usageError{fmt.Errorf("--size: %w", err)}
				}
			}
			if keyFile != "" {
				if do.AuthorizedKeys, err = os.ReadFile(keyFile); err != nil {
					return fmt.Errorf("--ssh-authorized-key: %w", err)
				}
			}
			do.Progress = g.progress()
			res, err := builder.ProvisionDisk(c.Context(), image, diskPath, trust, do)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) { printDisk(w, res) })
		},
	}
	f := c.Flags()
	f.StringVar(&image, "image", "", "signed image to provision from")
	f.StringVar(&root, "root", "", "directory to create the node in (absent or empty)")
	f.StringVar(&diskPath, "disk", "", "disk image file or block device to write")
	f.StringVar(&size, "size", "", "with --disk: disk size, e.g. 4G (default: see above)")
	f.StringVar(&do.Hostname, "hostname", "", "with --disk: the node's hostname")
	f.StringVar(&keyFile, "ssh-authorized-key", "", "with --disk: file of SSH public keys root may log in with")
	f.StringVar(&do.NodeID, "node-id", "", "with --disk: node id, which with the image fixes every GUID (default: random)")
	f.StringVar(&pub, "pub", "", "public key the image must be signed with (default: the keys the image lists)")
	f.StringVar(&repoDir, "repo", "", "provision at the head of this repository's line instead of --image")
	f.StringVar(&line, "line", "", "with --repo: the line (when the repository has several)")
	f.StringVar(&through, "through", "", "with --repo: provision at this version instead of the head")
	f.StringVar(&signKey, "key", "", "with --repo: key that signs the regenerated image (and that the repository must be signed with)")
	return c
}

func printDisk(w io.Writer, res *builder.DiskResult) {
	e := res.Ledger
	fmt.Fprintf(w, "provisioned disk %s (%s, node %s): line %s image %s head %s tree %s\n",
		res.Disk, builder.FormatSize(res.Layout.Size), res.NodeID, e.Line, e.Version, e.Head.Version, e.TreeDigest)
	for _, p := range res.Layout.Partitions {
		fmt.Fprintf(w, "  %d %-5s %9s at %9s  PARTUUID %s\n", p.Index, p.Name, builder.FormatSize(p.Size), builder.FormatSize(p.Offset), strings.ToLower(p.GUID))
	}
	if res.BootEntry {
		fmt.Fprintf(w, "  boot entry: /%s, /%s\n", res.Kernel, res.Initrd)
	} else {
		fmt.Fprintln(w, "  no kernel in the image: the ESP has systemd-boot but no boot entry")
	}
	if res.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", res.Note)
	}
}

func optionalPub(pub string) (*sign.KeySet, error) {
	if pub == "" {
		return nil, nil
	}
	return sign.LoadPublicFile(pub)
}

// restarter parses --restart-with.
func restarter(spec string, root string) (overlay.Restarter, error) {
	switch {
	case spec == "" && root == "/":
		return overlay.Systemd{}, nil
	case spec == "" || spec == "none":
		return nil, nil
	case spec == "systemd":
		return overlay.Systemd{}, nil
	case strings.HasPrefix(spec, "exec:"):
		tmpl := strings.TrimPrefix(spec, "exec:")
		if strings.TrimSpace(tmpl) == "" {
			return nil, usageError{fmt.Errorf("--restart-with exec: needs a command")}
		}
		return overlay.Exec{Template: tmpl}, nil
	}
	return nil, usageError{fmt.Errorf("--restart-with %q: want systemd, none or exec:'CMD {unit} {action}'", spec)}
}

func newApplyCmd(g *globals) *cobra.Command {
	var src overlay.Source
	var o overlay.ApplyOptions
	var root, restartWith string
	c := &cobra.Command{
		Use:   "apply-overlay --root DIR (FILE ... | --repo REPO [--through V])",
		Short: "Verify overlays, apply them in order, restart only what they touch",
		Long: `Apply overlays to the node at --root. Everything is verified before the node
changes: signatures against the node's keys, the parent chain against the
node's ledger, the image constraint, every path and every payload member.
Each overlay applies atomically under a journal and is recorded in the
ledger; then its restart plan runs. A restart failure rolls the overlay back.

--restart-with: systemd (default when --root is /), none (default otherwise:
restarts are recorded as pending), or exec:'CMD {unit} {action}'.`,
		Args: args(cobra.ArbitraryArgs),
		RunE: func(c *cobra.Command, a []string) error {
			src.Files = a
			if (len(a) == 0) == (src.Repo == "") {
				return usageError{fmt.Errorf("give overlay FILEs or --repo REPO (not both)")}
			}
			if src.Through != "" && src.Repo == "" {
				return usageError{fmt.Errorf("--through needs --repo")}
			}
			r, err := restarter(restartWith, root)
			if err != nil {
				return err
			}
			o.Restarter = r
			o.Progress = g.progress()
			rep, err := overlay.Apply(c.Context(), root, src, o)
			if rep != nil && (err == nil || g.json) {
				_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) { printApply(w, rep) })
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "node root directory")
	f.StringVar(&src.Repo, "repo", "", "apply every pending overlay of this repository")
	f.StringVar(&src.Through, "through", "", "with --repo: stop at this version")
	f.BoolVar(&o.DryRun, "dry-run", false, "print the plan and change nothing")
	f.StringVar(&restartWith, "restart-with", "", "systemd, none or exec:'CMD {unit} {action}'")
	f.DurationVar(&o.LockWait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}

func printApply(w io.Writer, rep *overlay.ApplyReport) {
	verb := "applied"
	if rep.DryRun {
		verb = "would apply"
	}
	if len(rep.Plans) == 0 {
		fmt.Fprintf(w, "node %s is at %s: nothing to apply\n", rep.Root, rep.From.Version)
	}
	for _, p := range rep.Plans {
		if p.AlreadyApplied {
			fmt.Fprintf(w, "%s: already applied, nothing to do\n", p.Version)
			continue
		}
		fmt.Fprintf(w, "%s %s (parent %s): %d writes, %d deletes\n", verb, p.Version, p.Parent, len(p.Writes), len(p.Deletes))
		for _, x := range p.Writes {
			fmt.Fprintf(w, "  write  /%s\n", x)
		}
		for _, x := range p.Deletes {
			fmt.Fprintf(w, "  delete /%s\n", x)
		}
		if len(p.Actions) == 0 {
			fmt.Fprintln(w, "  services: none affected")
		}
		printActions(w, p.Actions)
		if len(p.Unclaimed) > 0 {
			fmt.Fprintf(w, "  no service claims /%s: nothing restarted for it\n", strings.Join(p.Unclaimed, ", /"))
		}
	}
	if !rep.DryRun && rep.From != rep.To {
		fmt.Fprintf(w, "node %s: %s -> %s\n", rep.Root, rep.From.Version, rep.To.Version)
	}
	if len(rep.Pending) > 0 {
		fmt.Fprintln(w, "pending restarts (restart debt):")
		printActions(w, rep.Pending)
	}
}

func newRollbackCmd(g *globals) *cobra.Command {
	var root, restartWith string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "rollback --root DIR",
		Short: "Revert the last applied overlay and restart what it touched",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := restarter(restartWith, root)
			if err != nil {
				return err
			}
			rep, err := overlay.Rollback(c.Context(), root, r, wait, g.progress())
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), rep, func(w io.Writer) {
				fmt.Fprintf(w, "rolled back %s: node %s is at %s\n", rep.Reverted.Version, rep.Root, rep.Head.Version)
				printActions(w, rep.Actions)
			})
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&restartWith, "restart-with", "", "systemd, none or exec:'CMD {unit} {action}'")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}

func newRestartPendingCmd(g *globals) *cobra.Command {
	var root, restartWith string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "restart-pending --root DIR [--restart-with systemd|exec:'CMD {unit} {action}']",
		Short: "Carry out the restarts recorded as pending (restart debt) and record them",
		Args:  args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			spec := restartWith
			if spec == "" {
				spec = "systemd"
			}
			if spec == "none" {
				return usageError{fmt.Errorf("--restart-with none would settle nothing")}
			}
			r, err := restarter(spec, root)
			if err != nil {
				return err
			}
			rep, err := overlay.SettlePending(c.Context(), root, r, wait, g.progress())
			if rep != nil && (err == nil || g.json) {
				_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) {
					if len(rep.Pending) == 0 {
						fmt.Fprintf(w, "node %s has no pending restarts\n", root)
						return
					}
					fmt.Fprintf(w, "settled %d of %d pending restarts on %s:\n", len(rep.Restarted), len(rep.Pending), root)
					printActions(w, rep.Restarted)
				})
			}
			return err
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&restartWith, "restart-with", "", "systemd (default) or exec:'CMD {unit} {action}'")
	c.Flags().DurationVar(&wait, "lock-wait", 30*time.Second, "how long to wait for another apply to finish")
	required(c, "root")
	return c
}
