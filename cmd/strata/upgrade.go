package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/upgrade"
)

func newUpgradeCmd(g *globals) *cobra.Command {
	var root, diskPath string
	var confirm, cancel bool
	var sb sbFlags
	var settle time.Duration
	o := upgrade.Options{}
	c := &cobra.Command{
		Use:   "upgrade (--root / | --disk DISK [--secure-boot-key K --secure-boot-cert C]) (--image IMAGE.squashfs [--boot-image FILE.efi] | --repo REPO) [--drop-layers] [--compact] [--dry-run]",
		Short: "Switch a disk node to a whole new image (A/B, boot counting, fallback)",
		Long: `Write a new image of the node's line to the root partition the node does not
run (A or B) and add a boot entry for it with boot counting, so that the
next boot tries it: the running system is untouched until then.

The image must be signed by a key the node trusts, be of the node's line
and newer than the image the node runs. The node's layers stay stacked above
it when it can carry them (each layer's image constraint accepts the new
version, its paths are inside the image's managed hierarchies, it fits the
image's tree); a layer it cannot carry is refused before anything is written,
unless --drop-layers takes it (and every layer above it) off. With
--compact the image is the line's regenerated image of the node's head
(strata regenerate --through HEAD): its tree must be the node's, and the
node then runs it with no layers, its head the same.

--repo takes the image from a repository (a directory or URL, verified as
apply-overlay --repo verifies it) instead of a file: the newest image of
the node's line that strata repo add-image published, which must be newer
than the one the node runs, or with --compact the line's regenerated image
through the node's head. It is copied to $TMPDIR (on the running node,
/var/tmp) and checked against the index before it is written.

The image is written, synced, read back and hashed, then the upgrade is
staged in the node's state and the boot entry (strata-GEN-SLOT+TRIES.conf)
made bootable. At the next boot the initramfs stacks the layers the upgrade
keeps; strata-upgrade-confirm.service (strata upgrade --confirm, ordered
before boot-complete.target) checks the node's health and commits the
upgrade to the ledger, and systemd-bless-boot marks the entry good. A boot
that fails, or never gets healthy, uses up a try; after --tries of them the
firmware boots the old root again, whose activation records the failed
upgrade (strata status shows it).

--disk does the same to a disk image that is not running.

A disk provisioned for Secure Boot (provision --secure-boot-key) boots
signed unified kernel images, and its new root needs one
(strata-GEN-SLOT+TRIES.efi in /EFI/Linux, counted and blessed as a
loader entry is). A node upgrades itself with the new image's boot
image: signed for any node of the line where the db key is (strata
secure-boot sign-image), published with the image (strata repo
add-image --boot-image) and taken with it by --repo, or given with
--boot-image for --image. It must be signed and boot exactly the new
image's root hash, and claim the signer of the kernel image the node
runs (unless --secure-boot-rotate). On the running node, with Secure
Boot on, the firmware's db must hold a certificate that is or issued its
signer's, and its dbx must not revoke it (read from efivarfs; where they
do not settle it, the firmware decides); the firmware checks the
signature at the trial boot.
Or, with --disk, on the host that holds them, the db key and certificate
(--secure-boot-key, --secure-boot-cert) sign one for the new root. The
key must be the one whose certificate signed the kernel image the node
runs, which the machine's firmware is known to trust; another is refused
before anything is written, unless --secure-boot-rotate says the
firmware's db already holds its certificate (a db key rotation). The key
never goes to nodes.

--cancel
removes a staged upgrade that has not booted yet. --confirm is what the
boot runs: on a trial boot of a staged upgrade it commits it if the
node is healthy (enabled services of the catalog active within --settle,
their checks passing), and exits 1 if not; on any other boot it does
nothing.`,
		Example: `  strata upgrade --root / --image out/base-1.1.0.squashfs
  strata upgrade --root / --repo https://repo.example/base
  strata upgrade --root / --repo /srv/repo --compact
  strata upgrade --root / --image out/base-1.0.0+head.1.0.5.squashfs --compact
  strata upgrade --disk node.img --image out/base-1.1.0.squashfs --drop-layers
  strata upgrade --disk node.img --repo /srv/repo --secure-boot-key db.key --secure-boot-cert db.crt
  strata upgrade --root / --image out/base-1.1.0.squashfs --boot-image out/base-1.1.0.efi
  strata upgrade --root / --cancel
  strata upgrade --root / --confirm --settle 5m`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if (root == "") == (diskPath == "") {
				return usageError{fmt.Errorf("give --root / (the running node) or --disk DISK (not both)")}
			}
			if confirm && cancel {
				return usageError{fmt.Errorf("--confirm and --cancel exclude each other")}
			}
			if confirm {
				if diskPath != "" {
					return usageError{fmt.Errorf("--confirm runs on the booted node (--root /), not on a disk")}
				}
				return confirmUpgrade(c, g, root, settle, o.LockWait)
			}
			if root != "" && root != "/" {
				return usageError{fmt.Errorf("--root %s: a whole-image upgrade writes the disk of the running node, --root /; for a disk image use --disk", root)}
			}
			if cancel {
				if o.Image != "" || o.Repo != "" || o.DryRun || o.DropLayers || o.Compact {
					return usageError{fmt.Errorf("--cancel takes no --image, --repo, --dry-run, --drop-layers or --compact")}
				}
				return cancelUpgrade(c, g, diskPath, o.LockWait)
			}
			if (o.Image == "") == (o.Repo == "") {
				return usageError{fmt.Errorf("give --image IMAGE.squashfs (the signed image to upgrade to) or --repo REPO (take it from the line's repository), not both")}
			}
			if o.Tries < 1 || o.Tries > 9 {
				return usageError{fmt.Errorf("--tries %d: give 1 to 9 boots", o.Tries)}
			}
			if o.Compact && o.DropLayers {
				return usageError{fmt.Errorf("--compact folds every layer into the image; --drop-layers does not apply")}
			}
			if sb.given(c) && diskPath == "" {
				return usageError{fmt.Errorf("--secure-boot-key, --secure-boot-cert and --efi-stub are for --disk, on the host that holds the key: a node upgrades itself with the image's boot image (strata secure-boot sign-image; --boot-image, or published with the image for --repo)")}
			}
			if o.BootImage != "" && (o.Image == "" || sb.given(c)) {
				return usageError{fmt.Errorf("--boot-image goes with --image, without --secure-boot-key (--repo takes the one published with the image)")}
			}
			signer, err := sb.signer(c)
			if err != nil {
				return err
			}
			if o.RotateSecureBoot && signer == nil && o.BootImage == "" && o.Repo == "" {
				return usageError{fmt.Errorf("--secure-boot-rotate goes with --secure-boot-key, --boot-image or --repo (whose boot image it concerns)")}
			}
			o.SecureBoot, o.Stub = signer, sb.stub
			if ran, err := inPrivateMounts(c, nil); ran {
				return err
			}
			o.Progress = g.progress()
			var rep *upgrade.Report
			if diskPath == "" {
				o.SpoolDirs = spoolDirs()
			}
			if diskPath != "" {
				rep, err = upgrade.Disk(c.Context(), diskPath, o)
			} else {
				rep, err = upgrade.Live(c.Context(), o)
			}
			if rep != nil && rep.UpgradeReport != nil && (err == nil || g.json) {
				_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) { printUpgrade(w, rep) })
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "the running node: /")
	f.StringVar(&diskPath, "disk", "", "a provisioned disk image that is not running")
	imageVar(f, &o.Image, "the image (.squashfs; its signed .image.json beside it)")
	f.StringVar(&o.Repo, "repo", "", "take the image from this repository (directory or URL)")
	f.StringVar(&o.BootImage, "boot-image", "", "with --image, on a disk that boots signed kernel images: the image's boot image (strata secure-boot sign-image)")
	f.BoolVar(&o.DropLayers, "drop-layers", false, "take off the layers the image cannot carry instead of refusing")
	f.BoolVar(&o.Compact, "compact", false, "switch to the regenerated image of the node's head (no layers)")
	f.BoolVar(&o.DryRun, "dry-run", false, "verify and show the plan; write no image or boot entry")
	f.IntVar(&o.Tries, "tries", 3, "boots the new image gets to reach health before the old one boots again (1-9)")
	f.BoolVar(&confirm, "confirm", false, "at boot: commit a trial boot's upgrade once the node is healthy")
	f.DurationVar(&settle, "settle", 3*time.Minute, "with --confirm: how long services may take to become active")
	f.BoolVar(&cancel, "cancel", false, "remove a staged upgrade that has not booted")
	sb.add(c, "with --disk: the Secure Boot db key (PEM) the disk was provisioned with, to sign the new root's kernel image")
	f.BoolVar(&o.RotateSecureBoot, "secure-boot-rotate", false, "accept a db key (--secure-boot-key) or a boot image signer other than the one that signed the running kernel image (a db key rotation: the machine's db must already hold its certificate)")
	f.DurationVar(&o.LockWait, "lock-wait", 30*time.Second, "how long to wait for another strata run to finish")
	return c
}

func confirmUpgrade(c *cobra.Command, g *globals, root string, settle, lockWait time.Duration) error {
	rep, err := upgrade.Confirm(c.Context(), root, settle, lockWait)
	if rep != nil && (err == nil || g.json) {
		_ = g.output(c.OutOrStdout(), rep, func(w io.Writer) {
			switch {
			case rep.Confirmed:
				fmt.Fprintf(w, "upgrade to image %s confirmed: node %s healthy, at %s\n", rep.Image.Version, rep.Root, rep.Record.Head.Version)
			default:
				fmt.Fprintf(w, "node %s healthy on image %s; nothing to confirm: %s\n", rep.Root, rep.Image.Version, rep.Note)
			}
		})
	}
	return err
}

func cancelUpgrade(c *cobra.Command, g *globals, diskPath string, lockWait time.Duration) error {
	if ran, err := inPrivateMounts(c, nil); ran {
		return err
	}
	var u *manifests.StagedUpgrade
	var err error
	where := ""
	if diskPath != "" {
		u, err = upgrade.CancelDisk(c.Context(), diskPath, lockWait)
		where = " on " + diskPath
	} else {
		u, err = upgrade.CancelLive(c.Context(), lockWait)
	}
	if err != nil {
		return err
	}
	return g.output(c.OutOrStdout(), u, func(w io.Writer) {
		fmt.Fprintf(w, "cancelled the upgrade to image %s%s (root %s, boot entry %s removed)\n", u.Record.Version, where, strings.ToUpper(u.Record.Slot), u.Entry)
	})
}

// printUpgrade shows an upgrade's plan and what was written.
func printUpgrade(w io.Writer, rep *upgrade.Report) {
	verb := "staged"
	if rep.DryRun {
		verb = "would stage (dry run)"
	}
	kind := "upgrade"
	if rep.Compact {
		kind = "compaction"
	}
	if a := rep.Abandoned; a != nil {
		fmt.Fprintf(w, "dropped the upgrade to image %s staged at %s: it was interrupted before its boot entry %s went live\n", a.Record.Version, a.Staged, a.Entry)
	}
	fmt.Fprintf(w, "%s %s of %s: image %s -> %s\n", verb, kind, rep.Disk, rep.From.Version, rep.To.Version)
	fmt.Fprintf(w, "  head after:  %s (tree %s)\n", rep.Head.Version, rep.TreeDigest)
	layers := strings.Join(rep.Layers, " ")
	if layers == "" {
		layers = "none"
	}
	fmt.Fprintf(w, "  layers kept: %s\n", layers)
	for _, d := range rep.Dropped {
		fmt.Fprintf(w, "  dropped:     %s (%s)\n", d.Version, d.Reason)
	}
	if rep.Entry != nil {
		fmt.Fprintf(w, "  written:     root %s, boot entry %s (%d tries), kernel %s\n", strings.ToUpper(rep.Slot), rep.Entry.File, rep.Entry.TriesLeft, rep.Kernel)
		fmt.Fprintln(w, "  the next boot tries the new image; it is committed once that boot is healthy")
	}
}
