package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/sign"
)

func newProvisionCmd(g *globals) *cobra.Command {
	var image, root, state, pub, diskPath, size, keyFile, repoDir, line, through, signKey string
	var sb sbFlags
	var do disk.Options
	c := &cobra.Command{
		Use: "provision (--image IMAGE.squashfs | --repo REPO [--through V] --key K) (--root DIR | --state DIR | --disk PATH [--size SIZE] [--hostname H] [--ssh-authorized-key FILE] [--node-id ID] [--secure-boot-key K --secure-boot-cert C])",
		Example: `  strata provision --image out/demo-1.0.0.squashfs --root nodes/a
  strata provision --repo repo --key ci.key --disk /dev/sdb --hostname edge-7 --ssh-authorized-key ops.pub
  strata provision --image out/base-1.0.0.squashfs --disk node.img --size 4G
  strata provision --image out/base-1.0.0.squashfs --disk node.img --secure-boot-key db.key --secure-boot-cert db.crt`,
		Short: "Make a directory node or a bootable node disk from a signed image",
		Long: `Provision a node from a signed image, verified first (signature, then every
entry and file against the manifest).

--root DIR makes a directory node. --state DIR writes only the state of a
node that boots the image read-only (an overlayfs node: DIR/var is bound on
its /var, the image is its root, strata activate stacks its layers); the
state partition of a disk holds the same. --disk PATH writes a GPT disk, a raw image
file (created, or replaced when complete) or a block device (refused when it
or a partition of it is mounted): an EFI system partition with systemd-boot
(and the image's kernel and initrd, if it has them), root A holding the
image, an empty root B of the same size and an ext4 state partition with the
ledger and the node identity. --size (e.g. 4G) defaults to the smallest
layout with 1 GiB of state for a file, the whole device for a block device.
See docs/images.md, "Disk images".

--secure-boot-key and --secure-boot-cert sign the disk for UEFI Secure Boot
with a db key (unencrypted RSA, PEM) the machine's firmware trusts:
systemd-boot and a unified kernel image (the kernel, the initrds and the
command line with the root hash) are signed instead of a plain kernel and
loader entry. The image must have a kernel and a verity record. The node
upgrades itself with the next image's boot image (strata upgrade --repo),
or the disk is upgraded offline with the key (strata upgrade --disk
--secure-boot-key); the key never goes to a node. See docs/security.md,
"Secure Boot".

--boot-image and --signed-boot-loader make the same disk without the db
key on this host: the image's boot image (strata secure-boot sign-image)
and systemd-boot signed with the same key (strata secure-boot
sign-loader), both made where the key is. The boot image must boot
exactly this image's root hash, and both must name the same signer. Its
command line names no partition and no host: the node finds its root by
the root hash and takes its host name from the state partition.

--repo REPO instead of --image provisions at the line's head (or at
--through V): the line's image when no overlay follows it, otherwise a fresh
image regenerated with the chain folded in and signed with --key, so the new
machine joins the sequence at its head.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if n := btoi(root != "") + btoi(diskPath != "") + btoi(state != ""); n != 1 {
				return usageError{fmt.Errorf("give one of --root DIR, --state DIR or --disk PATH")}
			}
			if diskPath == "" && (size != "" || keyFile != "" || do.Hostname != "" || do.NodeID != "" || sb.given(c) || do.BootImage != "" || do.SignedLoader != "") {
				return usageError{fmt.Errorf("--size, --hostname, --ssh-authorized-key, --node-id, --secure-boot-key, --boot-image and --signed-boot-loader need --disk")}
			}
			if (do.BootImage == "") != (do.SignedLoader == "") || do.BootImage != "" && sb.given(c) {
				return usageError{fmt.Errorf("give --boot-image and --signed-boot-loader together, and not with --secure-boot-key")}
			}
			signer, err := sb.signer(c)
			if err != nil {
				return err
			}
			do.SecureBoot, do.Stub = signer, sb.stub
			if do.Hostname != "" {
				if err := disk.CheckHostname(do.Hostname); err != nil {
					return usageError{fmt.Errorf("--hostname: %w", err)}
				}
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
				workDir, err := scratch.MkdirTemp("provision")
				if err != nil {
					return err
				}
				defer workDir.RemoveAll()
				work := workDir.Path
				if image, err = builder.HeadImage(c.Context(), repoDir, line, through, work, key, builder.WithTrust(trust), builder.WithProgress(g.progress())); err != nil {
					return err
				}
				if trust != nil && key != nil {
					// A regenerated head is signed by --key.
					if err := trust.Merge(key.PublicKeySet()); err != nil {
						return err
					}
				}
			}
			if state != "" {
				e, err := builder.ProvisionState(c.Context(), image, state, trust)
				if err != nil {
					return err
				}
				return g.output(c.OutOrStdout(), e, func(w io.Writer) {
					fmt.Fprintf(w, "provisioned state %s: line %s image %s head %s tree %s\n", state, e.Line, e.Version, e.Head.Version, e.TreeDigest)
				})
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
				if do.Size, err = disk.ParseSize(size); err != nil {
					return usageError{fmt.Errorf("--size: %w", err)}
				}
			}
			if keyFile != "" {
				if do.AuthorizedKeys, err = os.ReadFile(keyFile); err != nil {
					return fmt.Errorf("--ssh-authorized-key: %w", err)
				}
			}
			do.Progress = g.progress()
			res, err := disk.Provision(c.Context(), image, diskPath, trust, do)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) { printDisk(w, res) })
		},
	}
	f := c.Flags()
	imageVar(f, &image, "signed image to provision from")
	f.StringVar(&root, "root", "", "directory to create the node in (absent or empty)")
	f.StringVar(&diskPath, "disk", "", "disk image file or block device to write")
	f.StringVar(&state, "state", "", "directory to write the state of a node that boots the image read-only (its var/ is the node's /var)")
	f.StringVar(&size, "size", "", "with --disk: disk size, e.g. 4G (default: see above)")
	f.StringVar(&do.Hostname, "hostname", "", "with --disk: the node's hostname")
	f.StringVar(&keyFile, "ssh-authorized-key", "", "with --disk: file of SSH public keys root may log in with")
	f.StringVar(&do.NodeID, "node-id", "", "with --disk: node id, which with the image fixes every GUID (default: random)")
	f.StringVar(&pub, "pub", "", "public key the image must be signed with (default: the keys the image lists); with --repo, also trusted to verify the line")
	f.StringVar(&repoDir, "repo", "", "provision at the head of this repository's line instead of --image")
	f.StringVar(&line, "line", "", "with --repo: the line (when the repository has several)")
	versionVar(c, &through, "through", "with --repo: provision at this version instead of the head")
	f.StringVar(&signKey, "key", "", "with --repo: key that signs the regenerated image (and that the repository must be signed with)")
	sb.add(c, "with --disk: Secure Boot db key (PEM) to sign the boot loader and kernel image with")
	f.StringVar(&do.BootImage, "boot-image", "", "with --disk, instead of --secure-boot-key: the image's boot image (strata secure-boot sign-image)")
	f.StringVar(&do.SignedLoader, "signed-boot-loader", "", "with --boot-image: systemd-boot signed with the same db key (strata secure-boot sign-loader)")
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func optionalPub(pub string) (*sign.KeySet, error) {
	if pub == "" {
		return nil, nil
	}
	return sign.LoadPublicFile(pub)
}

func printDisk(w io.Writer, res *disk.Result) {
	e := res.Ledger
	fmt.Fprintf(w, "provisioned disk %s (%s, node %s): line %s image %s head %s tree %s\n",
		res.Disk, disk.FormatSize(res.Layout.Size), res.NodeID, e.Line, e.Version, e.Head.Version, e.TreeDigest)
	for _, p := range res.Layout.Partitions {
		fmt.Fprintf(w, "  %d %-5s %9s at %9s  PARTUUID %s\n", p.Index, p.Name, disk.FormatSize(p.Size), disk.FormatSize(p.Offset), strings.ToLower(p.GUID))
	}
	if res.UKI != "" {
		fmt.Fprintf(w, "  Secure Boot: %s (signed: /%s, /%s, the command line) and systemd-boot\n", res.UKI, res.Kernel, res.Initrd)
		fmt.Fprintf(w, "  root A: dm-verity, root hash %s\n", res.RootHash)
	} else if res.BootEntry {
		fmt.Fprintf(w, "  boot entry: /%s, /%s\n", res.Kernel, res.Initrd)
		if res.RootHash != "" {
			fmt.Fprintf(w, "  root A: dm-verity, root hash %s\n", res.RootHash)
		} else {
			fmt.Fprintln(w, "  root A: unverified (the image has no verity record or no strata)")
		}
	} else {
		fmt.Fprintln(w, "  no kernel in the image: the ESP has systemd-boot but no boot entry")
	}
	if res.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", res.Note)
	}
}
