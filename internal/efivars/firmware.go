package efivars

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
)

// DefaultDir is where efivarfs shows the running machine's EFI variables.
const DefaultDir = "/sys/firmware/efi/efivars"

// Firmware is the Secure Boot state of the running machine, as its
// EFI variables (efivarfs) show it: whether Secure Boot is on, and the
// signature databases the firmware checks kernel images against.
type Firmware struct {
	// Dir is the efivarfs directory read.
	Dir string
	// SecureBoot is the SecureBoot variable: the firmware checks the
	// signatures of what it starts.
	SecureBoot bool
	// DB and DBX are the allowed and forbidden signature databases; nil
	// when the variable does not exist.
	DB, DBX *Database
}

// ReadFirmware reads SecureBoot, db and dbx from dir, an efivarfs
// directory (DefaultDir on a machine that booted through UEFI). A
// machine without EFI variables (no dir) gives nil and no error. Each
// variable is read bounded, and never from a FIFO or a device.
func ReadFirmware(dir string) (*Firmware, error) {
	if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("EFI variables: %s is not a directory", dir)
	}
	fw := &Firmware{Dir: dir}
	sb, err := readVar(dir, "SecureBoot", guidGlobal)
	if err != nil {
		return nil, err
	}
	fw.SecureBoot = len(sb) == 1 && sb[0] == 1
	for _, v := range []struct {
		name string
		to   **Database
	}{{"db", &fw.DB}, {"dbx", &fw.DBX}} {
		b, err := readVar(dir, v.name, guidImageSecurityDB)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		if *v.to, err = ParseDatabase(b); err != nil {
			return nil, fmt.Errorf("reading %s: %w", varPath(dir, v.name, guidImageSecurityDB), err)
		}
	}
	return fw, nil
}

func varPath(dir, name string, vendor GUID) string {
	return filepath.Join(dir, name+"-"+vendor.String())
}

// readVar returns the data of variable name of vendor (nil when it does
// not exist), without the 4 attribute bytes efivarfs puts first.
func readVar(dir, name string, vendor GUID) ([]byte, error) {
	p := varPath(dir, name, vendor)
	b, err := safefile.ReadFollow(p, maxDatabase+4)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("reading %s: %d bytes, not an EFI variable (attributes first)", p, len(b))
	}
	return b[4:], nil
}

// Trust is what a machine's firmware makes of a signature, as far as its
// db and dbx tell.
type Trust int

const (
	// TrustUnknown: the databases do not settle it (Secure Boot is off,
	// or the db admits images by their digest, which is not computed).
	TrustUnknown Trust = iota
	// Trusted: a certificate in db is the signer's or issued it
	// (directly or through certificates the signature carries), and dbx
	// names none of them.
	Trusted
	// Untrusted: no certificate in db leads to the signer, and the db
	// lists nothing else an image could be admitted by.
	Untrusted
	// Revoked: dbx names the signer's certificate or one it chains to.
	Revoked
)

// maxCarried bounds the certificates a signature may carry for Check to
// look for a chain through them (a chain is a few certificates long);
// past it, Check leaves the decision to the firmware.
const maxCarried = 64

// Check tells whether the firmware would take a signature by signer,
// whose signature carries the certificates carried (intermediates the
// chain to a db certificate may pass through). Like the firmware, it
// checks each issuer's signature over the certificate it issued, not
// names, validity dates or key usage, and a certificate dbx names is
// revoked whatever the time of its revocation.
func (f *Firmware) Check(signer *x509.Certificate, carried []*x509.Certificate) Trust {
	if f == nil || !f.SecureBoot || f.DB == nil || len(carried) > maxCarried {
		return TrustUnknown
	}
	switch t := f.chain(signer, carried); t {
	case Trusted, Revoked:
		return t
	}
	if len(f.DB.Hashes) > 0 || f.DB.Other > 0 {
		return TrustUnknown
	}
	return Untrusted
}

// chain walks from signer towards the db, through carried certificates
// that issued the ones before them, each certificate once: Trusted when
// a db certificate is or issued one on the way and dbx names none of
// them, else Revoked when dbx stood in the way, else Untrusted.
func (f *Firmware) chain(signer *x509.Certificate, carried []*x509.Certificate) Trust {
	if f.revoked(signer) {
		return Revoked
	}
	out := Untrusted
	seen := map[string]bool{string(signer.Raw): true}
	for queue := []*x509.Certificate{signer}; len(queue) > 0; queue = queue[1:] {
		c := queue[0]
		for _, d := range f.DB.Certs {
			if bytes.Equal(d.Raw, c.Raw) || issued(d, c) {
				if !f.revoked(d) {
					return Trusted
				}
				out = Revoked
			}
		}
		for _, p := range carried {
			if seen[string(p.Raw)] || !issued(p, c) {
				continue
			}
			seen[string(p.Raw)] = true
			if f.revoked(p) {
				out = Revoked
				continue
			}
			queue = append(queue, p)
		}
	}
	return out
}

// issued reports whether parent's key signed c. Names are not compared:
// the firmware checks the signature, and two encodings of one name are
// still one issuer.
func issued(parent, c *x509.Certificate) bool {
	return parent.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// revoked reports whether dbx names c, by its bytes or by the SHA-256 of
// its to-be-signed part.
func (f *Firmware) revoked(c *x509.Certificate) bool {
	if f.DBX == nil {
		return false
	}
	for _, x := range f.DBX.Certs {
		if bytes.Equal(x.Raw, c.Raw) {
			return true
		}
	}
	sum := sha256.Sum256(c.RawTBSCertificate)
	for _, h := range f.DBX.CertHashes {
		if h == sum {
			return true
		}
	}
	return false
}
