package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

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
	sb.AddCommand(vars)
	return sb
}
