package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder/disk"
)

func newBootCmd(g *globals) *cobra.Command {
	bc := &cobra.Command{Use: "boot", Short: "What an initramfs runs to boot a disk node"}
	var o disk.OpenRootOptions
	c := &cobra.Command{
		Use:   "open-root --device DEV --root-hash HASH [--dir DIR] [--name NAME]",
		Short: "Open a disk node's root partition as a dm-verity device, after checking the signed root hash",
		Long: `Run by a disk node's initramfs before it mounts the root. The boot entry
strata wrote names the root hash on the kernel command line
(strata.verity=HASH) and loads a second initrd whose files are below
--dir (default /strata): the image's signed verity record, the keys the
image trusts and this strata. open-root checks the record's signature
with those keys, that the record names exactly --root-hash, and that
--device holds the image and its hash tree; then it opens --device as
the dm-verity device /dev/mapper/NAME (veritysetup open), which the
initramfs mounts as the root. From then on the kernel checks every
block read against the root hash; a changed block reads as an I/O
error. Any failure exits non-zero and the initramfs stops the boot: a
root the entry says is verified never boots unverified.`,
		Example: `  strata boot open-root --device /dev/vda2 --root-hash 4a5885…0d0a`,
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Device == "" || o.RootHash == "" {
				return usageError{fmt.Errorf("--device and --root-hash are required")}
			}
			r, err := disk.OpenRoot(c.Context(), o)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), r, func(w io.Writer) {
				fmt.Fprintf(w, "root %s opened as %s: dm-verity, image %s-%s, root hash %s signed by %s\n",
					r.Device, r.Mapped, r.Verity.Line, r.Verity.Version, r.Verity.RootHash, r.KeyID)
			})
		},
	}
	c.Flags().StringVar(&o.Device, "device", "", "the root partition")
	c.Flags().StringVar(&o.RootHash, "root-hash", "", "the root hash the kernel command line names")
	c.Flags().StringVar(&o.Dir, "dir", disk.VerityInitrdDir, "the verity initrd's files")
	c.Flags().StringVar(&o.Name, "name", disk.VerityDevice, "the device-mapper name")
	bc.AddCommand(c, newFindRootCmd(g))
	return bc
}

func newFindRootCmd(g *globals) *cobra.Command {
	var o disk.FindRootOptions
	c := &cobra.Command{
		Use:   "find-root --root-hash HASH [--dir DIR]",
		Short: "Print the partition that holds the image a signed root hash names",
		Long: `Run by a disk node's initramfs when the kernel command line says
strata.root=auto instead of naming the root partition: a unified kernel
image built for every node of a line (strata secure-boot sign-image)
cannot know a node's partitions. find-root checks the verity record
below --dir as open-root does (its signature, and that it names exactly
--root-hash), then reads the top block of the hash tree where the record
puts it on each partition, and prints the one whose digest is the root
hash. This only finds the device: open-root then opens it through
dm-verity, and the kernel checks every block read. Where systemd-boot
names the ESP the firmware booted from (LoaderDevicePartUUID), only
partitions on that disk are taken; of several, the root partition of
the slot the selected boot entry is named for (LoaderEntrySelected). If
that leaves more than one, or none matches, it exits 3.`,
		Example: `  dev=$(strata boot find-root --root-hash 4a5885…0d0a) && strata boot open-root --device "$dev" --root-hash 4a5885…0d0a`,
		Args:    args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.RootHash == "" {
				return usageError{fmt.Errorf("--root-hash is required")}
			}
			dev, err := disk.FindRoot(c.Context(), o)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), map[string]string{"device": dev}, func(w io.Writer) { fmt.Fprintln(w, dev) })
		},
	}
	c.Flags().StringVar(&o.RootHash, "root-hash", "", "the root hash the kernel command line names")
	c.Flags().StringVar(&o.Dir, "dir", disk.VerityInitrdDir, "the verity initrd's files")
	return c
}
