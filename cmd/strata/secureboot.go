package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/secureboot"
)

func newSecureBootCmd(g *globals) *cobra.Command {
	sb := &cobra.Command{Use: "secure-boot", Short: "Secure Boot keys for provisioned disks"}
	var v secureboot.OVMFVars
	vars := &cobra.Command{
		Use: "ovmf-vars --pk PK.crt --kek KEK.crt --db DB.crt --out VARS.fd [--template OVMF_VARS_4M.fd]",
		Example: `  strata secure-boot ovmf-vars --pk pk.crt --kek kek.crt --db db.crt --out node-vars.fd
  qemu-system-x86_64 -machine q35,smm=on -global driver=cfi.pflash01,property=secure,value=on \
    -drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd \
    -drive if=pflash,format=raw,unit=1,file=node-vars.fd -drive file=node.img,format=raw ...`,
		Short: "Write an OVMF variable store with your Platform Key, KEK and db enrolled",
		Long: `Write a copy of an empty OVMF variable store (--template, default Debian's
OVMF_VARS_4M.fd) with the given certificates (PEM, RSA) enrolled as the
Platform Key, the key exchange keys and the signature database, and Secure
Boot on. A virtual machine started with OVMF's Secure Boot build and this
store runs only EFI binaries signed with a --db key: a disk from strata
provision --secure-boot-key signed with it boots, anything else is refused.
Physical machines enroll the same certificates through their firmware setup
or sbctl; see docs/security.md, "Secure Boot".`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := secureboot.EnrollOVMF(v); err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), v, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s: PK %s, KEK %v, db %v enrolled, Secure Boot on\n", v.Out, v.PK, v.KEK, v.DB)
			})
		},
	}
	f := vars.Flags()
	f.StringVar(&v.Template, "template", secureboot.DefaultOVMFVars, "empty OVMF variable store to start from")
	f.StringVar(&v.Out, "out", "", "variable store to write")
	f.StringVar(&v.PK, "pk", "", "Platform Key certificate (PEM)")
	f.StringArrayVar(&v.KEK, "kek", nil, "key exchange key certificate (PEM; repeatable)")
	f.StringArrayVar(&v.DB, "db", nil, "signature database certificate (PEM; repeatable): the key disks are signed with")
	required(vars, "out", "pk", "kek", "db")
	sb.AddCommand(vars, newSignImageCmd(g), newSignLoaderCmd(g))
	return sb
}

func newSignImageCmd(g *globals) *cobra.Command {
	var image, out, pub string
	var s sbFlags
	c := &cobra.Command{
		Use: "sign-image --image IMAGE.squashfs --secure-boot-key K --secure-boot-cert C [--out FILE.efi] [--pub KEY] [--efi-stub STUB]",
		Example: `  strata secure-boot sign-image --image out/base-1.1.0.squashfs --secure-boot-key db.key --secure-boot-cert db.crt
  strata repo add-image repo --image out/base-1.1.0.squashfs --boot-image out/base-1.1.0.efi --key ci.key`,
		Short: "Sign an image's boot image: one unified kernel image for every node of its line",
		Long: `Write the boot image of a signed image: a unified kernel image (the image's
kernel, its verity initrd and initrd, and the command line) signed with
the db key, for any node of the line. Its command line names the image's
root hash and strata.root=auto, no partition and no host name: the
initramfs takes the partition whose hash tree matches the root hash
(strata boot find-root) and the host name from the node's state
partition. The image is verified first (its manifest against --pub, or
the keys it lists, then every file), and must have a kernel and a verity
record. Run it where the db key is (CI), publish the result with the
image (strata repo add-image --boot-image), and nodes that boot signed
images upgrade themselves to it (strata upgrade --root / --repo) without
the key. --out defaults to the image's path with .efi for .squashfs.
See docs/security.md, "Secure Boot".`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			signer, err := s.required(c)
			if err != nil {
				return err
			}
			trust, err := optionalPub(pub)
			if err != nil {
				return err
			}
			b, err := disk.SignImage(c.Context(), image, out, trust, signer, s.stub)
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), b, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s: boot image of %s %s for any node of the line (%d bytes, sha256 %s)\n", b.File, b.Line, b.Version, b.Size, b.SHA256)
				fmt.Fprintf(w, "  signed for %s: kernel /%s, command line %s\n", b.Signer, b.Kernel, b.Cmdline)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&image, "image", "", "the signed image (IMAGE.squashfs, its manifest and verity record beside it)")
	f.StringVar(&out, "out", "", "the boot image to write (default: the image's path, .efi for .squashfs)")
	f.StringVar(&pub, "pub", "", "public key the image must be signed with (default: the keys it lists)")
	s.add(c, "Secure Boot db key (PEM, unencrypted RSA) to sign with")
	required(c, "image")
	return c
}

// sbFlags are the Secure Boot signing flags of provision and upgrade:
// a db key, its certificate and the EFI stub.
type sbFlags struct {
	key, cert, stub string
}

// add registers the flags on c; keyUsage describes --secure-boot-key.
func (s *sbFlags) add(c *cobra.Command, keyUsage string) {
	f := c.Flags()
	f.StringVar(&s.key, "secure-boot-key", "", keyUsage)
	f.StringVar(&s.cert, "secure-boot-cert", "", "with --secure-boot-key: its certificate (PEM), the one enrolled in the firmware's db")
	f.StringVar(&s.stub, "efi-stub", disk.DefaultStub, "with --secure-boot-key: systemd's EFI stub the unified kernel image is built on")
}

// given reports whether any of the flags was given.
func (s *sbFlags) given(c *cobra.Command) bool {
	return s.key != "" || s.cert != "" || c.Flags().Changed("efi-stub")
}

// signer checks the flags go together and loads the key (nil when no
// key was given).
func (s *sbFlags) signer(c *cobra.Command) (*secureboot.Signer, error) {
	if s.key == "" && c.Flags().Changed("efi-stub") {
		return nil, usageError{fmt.Errorf("--efi-stub needs --secure-boot-key")}
	}
	if (s.key == "") != (s.cert == "") {
		return nil, usageError{fmt.Errorf("give --secure-boot-key and --secure-boot-cert together")}
	}
	if s.key == "" {
		return nil, nil
	}
	return secureboot.LoadSigner(s.key, s.cert)
}

func newSignLoaderCmd(g *globals) *cobra.Command {
	var bootEFI, out string
	var s sbFlags
	c := &cobra.Command{
		Use:     "sign-loader --secure-boot-key K --secure-boot-cert C --out FILE.efi [--boot-efi systemd-bootx64.efi]",
		Example: `  strata secure-boot sign-loader --secure-boot-key db.key --secure-boot-cert db.crt --out systemd-boot.signed.efi`,
		Short:   "Sign systemd-boot for disks provisioned from boot images",
		Long: `Write systemd-boot (--boot-efi, default Debian's systemd-bootx64.efi)
signed with the db key to --out: with an image's boot image (strata
secure-boot sign-image) it lets strata provision --disk make a disk that
boots under Secure Boot on a host without the key (--boot-image,
--signed-boot-loader). Run it where the key is.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			signer, err := s.required(c)
			if err != nil {
				return err
			}
			if err := disk.SignLoader(c.Context(), bootEFI, out, signer); err != nil {
				return err
			}
			res := map[string]string{"file": out, "signer": signer.Certificate().Subject.String()}
			return g.output(c.OutOrStdout(), res, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s: systemd-boot signed for %s\n", out, res["signer"])
			})
		},
	}
	f := c.Flags()
	f.StringVar(&bootEFI, "boot-efi", disk.DefaultBootEFI, "systemd-boot's EFI binary to sign")
	f.StringVar(&out, "out", "", "the signed boot loader to write")
	f.StringVar(&s.key, "secure-boot-key", "", "Secure Boot db key (PEM, unencrypted RSA) to sign with")
	f.StringVar(&s.cert, "secure-boot-cert", "", "its certificate (PEM), the one enrolled in the firmware's db")
	required(c, "out")
	return c
}

// required is signer for a command that needs the key.
func (s *sbFlags) required(c *cobra.Command) (*secureboot.Signer, error) {
	if s.key == "" {
		return nil, usageError{fmt.Errorf("--secure-boot-key and --secure-boot-cert are required")}
	}
	return s.signer(c)
}
