package secureboot

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/efivars"
	"github.com/strata-dev/strata/internal/safefile"
)

// DefaultOVMFVars is the empty variable store of Debian's ovmf package,
// the template for the firmware of a qemu machine with Secure Boot
// (OVMF_CODE_4M.secboot.fd).
const DefaultOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"

// maxVarStore bounds the variable store read (OVMF's is 528 KiB).
const maxVarStore = 16 << 20

// Owner is the SignatureOwner strata writes for the certificates it
// enrolls.
var Owner = efivars.GUID{0x61, 0x72, 0x74, 0x73, 0x61, 0x74, 0x00, 0x40, 0x80, 0x00, 0x73, 0x65, 0x63, 0x62, 0x6f, 0x74}

// OVMFVars names what EnrollOVMF reads and writes.
type OVMFVars struct {
	// Template is an empty OVMF variable store (default
	// DefaultOVMFVars); Out the store to write.
	Template, Out string
	// PK, KEK and DB are PEM certificates: the platform key, the key
	// exchange keys and the signature database.
	PK      string
	KEK, DB []string
}

// EnrollOVMF writes to v.Out a copy of the template store with the
// certificates enrolled (package efivars), so that qemu with OVMF's
// Secure Boot build and that store boots with Secure Boot on and trusts
// exactly v.DB. Every certificate is checked first; Out is replaced only
// when complete.
func EnrollOVMF(v OVMFVars) error {
	if v.Template == "" {
		v.Template = DefaultOVMFVars
	}
	if v.PK == "" || len(v.KEK) == 0 || len(v.DB) == 0 {
		return fmt.Errorf("enrolling %s: a platform key, a KEK and a db certificate are all needed", v.Out)
	}
	var k efivars.Keys
	k.Owner = Owner
	c, err := ReadCertificate(v.PK)
	if err != nil {
		return err
	}
	k.PK = c.Raw
	for _, p := range v.KEK {
		c, err := ReadCertificate(p)
		if err != nil {
			return err
		}
		k.KEK = append(k.KEK, c.Raw)
	}
	for _, p := range v.DB {
		c, err := ReadCertificate(p)
		if err != nil {
			return err
		}
		k.DB = append(k.DB, c.Raw)
	}
	tmpl, err := safefile.ReadFollow(v.Template, maxVarStore)
	if err != nil {
		return fmt.Errorf("the variable store template: %w", err)
	}
	store, err := efivars.Enroll(tmpl, k)
	if err != nil {
		return fmt.Errorf("enrolling into %s: %w", v.Template, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(v.Out), "."+filepath.Base(v.Out)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", v.Out, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(store)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), v.Out)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", v.Out, err)
	}
	return nil
}
