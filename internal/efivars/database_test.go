package efivars

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// issue returns a certificate for cn with a new ECDSA key, issued by
// parent (self-signed when parent is nil), and its key.
func issue(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return certify(t, cn, k, parent, parentKey), k
}

// certify returns a certificate for cn and key k, issued by parent
// (self-signed when parent is nil).
func certify(t testing.TB, cn string, k *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, k
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// x509SHA256Entry is the data of an EFI_CERT_X509_SHA256 entry for c.
func x509SHA256Entry(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.RawTBSCertificate)
	return append(sum[:], make([]byte, 16)...) // and the time of revocation
}

func TestParseDatabase(t *testing.T) {
	a, _ := issue(t, "db one", nil, nil)
	b, _ := issue(t, "db two", nil, nil)
	digest := sha256.Sum256([]byte("an image"))
	var db []byte
	db = append(db, signatureList(guidCertX509, testOwner, a.Raw)...)
	db = append(db, signatureList(guidCertSHA256, testOwner, digest[:])...)
	db = append(db, signatureList(guidCertX509SHA256, testOwner, x509SHA256Entry(b))...)
	db = append(db, signatureList(mustGUID("3c5766e8-269c-4e34-aa14-ed776e85b3b6"), testOwner, []byte("an RSA-2048 key"))...)
	// A list with a header and two entries, as firmware setups write them.
	le := binary.LittleEndian
	entry := append(append([]byte{}, testOwner[:]...), b.Raw...)
	two := make([]byte, sigListHeader)
	copy(two, guidCertX509[:])
	le.PutUint32(two[16:], uint32(sigListHeader+4+2*len(entry)))
	le.PutUint32(two[20:], 4)
	le.PutUint32(two[24:], uint32(len(entry)))
	two = append(two, 1, 2, 3, 4)
	two = append(two, entry...)
	two = append(two, entry...)
	db = append(db, two...)

	d, err := ParseDatabase(db)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Certs) != 3 || !d.Certs[0].Equal(a) || !d.Certs[1].Equal(b) || !d.Certs[2].Equal(b) {
		t.Errorf("certificates: %d", len(d.Certs))
	}
	if len(d.Hashes) != 1 || d.Hashes[0] != digest {
		t.Errorf("image digests: %x", d.Hashes)
	}
	if len(d.CertHashes) != 1 || d.CertHashes[0] != sha256.Sum256(b.RawTBSCertificate) {
		t.Errorf("certificate digests: %x", d.CertHashes)
	}
	if d.Other != 1 {
		t.Errorf("other entries: %d, want 1", d.Other)
	}
	// An entry padded after its certificate, as some firmware setups
	// write them, holds that certificate.
	if d, err := ParseDatabase(signatureList(guidCertX509, testOwner, append(append([]byte{}, a.Raw...), 0, 0, 0, 0))); err != nil || len(d.Certs) != 1 || !d.Certs[0].Equal(a) {
		t.Errorf("a padded certificate entry: %+v, %v", d, err)
	}
	if d, err := ParseDatabase(nil); err != nil || len(d.Certs)+len(d.Hashes)+d.Other != 0 {
		t.Errorf("empty database: %+v, %v", d, err)
	}

	// Every cut of it short is refused, never a panic.
	for n := 1; n < len(db); n++ {
		if _, err := ParseDatabase(db[:n]); err == nil {
			// A cut at a list boundary is a shorter, valid database.
			if _, err := ParseDatabase(db[n:]); err != nil {
				t.Errorf("cut at %d parses, and what follows does not: %v", n, err)
			}
		} else if !errors.Is(err, ErrBadDatabase) {
			t.Errorf("cut at %d: %v, want ErrBadDatabase", n, err)
		}
	}
	bad := func(name string, f func(b []byte)) {
		b := signatureList(guidCertX509, testOwner, a.Raw)
		f(b)
		if _, err := ParseDatabase(b); !errors.Is(err, ErrBadDatabase) {
			t.Errorf("%s: %v, want ErrBadDatabase", name, err)
		}
	}
	bad("list larger than the data", func(b []byte) { le.PutUint32(b[16:], uint32(len(b)+1)) })
	bad("list smaller than its header", func(b []byte) { le.PutUint32(b[16:], 10) })
	bad("header past the list", func(b []byte) { le.PutUint32(b[20:], 1<<31) })
	bad("entries of no size", func(b []byte) { le.PutUint32(b[24:], 0) })
	bad("entries of the owner alone", func(b []byte) { le.PutUint32(b[24:], sigOwnerSize) })
	bad("entries that do not divide the list", func(b []byte) { le.PutUint32(b[24:], uint32(len(b)-sigListHeader-1)) })
	bad("a certificate that does not parse", func(b []byte) { b[sigListHeader+sigOwnerSize] ^= 0xff })
	if _, err := ParseDatabase(signatureList(guidCertSHA256, testOwner, []byte("short"))); !errors.Is(err, ErrBadDatabase) {
		t.Errorf("a SHA-256 entry of 5 bytes: %v", err)
	}
	if _, err := ParseDatabase(make([]byte, maxDatabase+1)); !errors.Is(err, ErrBadDatabase) {
		t.Errorf("an oversized database: %v", err)
	}
}

// FuzzParseDatabase: go test -fuzz FuzzParseDatabase ./internal/efivars/
// explores more; any input is parsed or refused, never a panic.
func FuzzParseDatabase(f *testing.F) {
	digest := sha256.Sum256(nil)
	f.Add(signatureList(guidCertSHA256, testOwner, digest[:]))
	f.Add(signatureList(guidCertX509, testOwner, newCert(f, "fuzz db", false)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseDatabase(b); err != nil && !errors.Is(err, ErrBadDatabase) {
			t.Fatalf("not ErrBadDatabase: %v", err)
		}
	})
}

func TestFirmwareCheck(t *testing.T) {
	root, rootKey := issue(t, "fleet root", nil, nil)
	mid, midKey := issue(t, "fleet intermediate", root, rootKey)
	leaf, _ := issue(t, "fleet db 2027", mid, midKey)
	other, _ := issue(t, "someone else", nil, nil)
	on := func(db, dbx *Database) *Firmware { return &Firmware{SecureBoot: true, DB: db, DBX: dbx} }
	for _, c := range []struct {
		name    string
		fw      *Firmware
		carried []*x509.Certificate
		want    Trust
	}{
		{"db holds the signer", on(&Database{Certs: []*x509.Certificate{other, leaf}}, nil), nil, Trusted},
		{"db holds its issuer", on(&Database{Certs: []*x509.Certificate{mid}}, nil), nil, Trusted},
		{"db holds the root, the signature carries the intermediate", on(&Database{Certs: []*x509.Certificate{root}}, nil), []*x509.Certificate{leaf, mid}, Trusted},
		{"db holds the root, no intermediate carried", on(&Database{Certs: []*x509.Certificate{root}}, nil), []*x509.Certificate{leaf}, Untrusted},
		{"db holds another certificate", on(&Database{Certs: []*x509.Certificate{other}}, nil), []*x509.Certificate{leaf, mid}, Untrusted},
		{"db admits images by digest too", on(&Database{Certs: []*x509.Certificate{other}, Hashes: [][32]byte{{1}}}, nil), nil, TrustUnknown},
		{"db holds entries of other types", on(&Database{Certs: []*x509.Certificate{other}, Other: 1}, nil), nil, TrustUnknown},
		{"Secure Boot off", &Firmware{DB: &Database{Certs: []*x509.Certificate{other}}}, nil, TrustUnknown},
		{"no db", on(nil, nil), nil, TrustUnknown},
		{"dbx holds the signer", on(&Database{Certs: []*x509.Certificate{leaf}}, &Database{Certs: []*x509.Certificate{leaf}}), nil, Revoked},
		{"dbx names the intermediate by digest", on(&Database{Certs: []*x509.Certificate{root}}, &Database{CertHashes: [][32]byte{sha256.Sum256(mid.RawTBSCertificate)}}), []*x509.Certificate{leaf, mid}, Revoked},
		{"dbx holds the db certificate", on(&Database{Certs: []*x509.Certificate{root}}, &Database{Certs: []*x509.Certificate{root}}), []*x509.Certificate{mid}, Revoked},
		{"dbx holds another certificate", on(&Database{Certs: []*x509.Certificate{mid}}, &Database{Certs: []*x509.Certificate{other}, Hashes: [][32]byte{{2}}}), nil, Trusted},
	} {
		if got := c.fw.Check(leaf, c.carried); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// Certificates that all issue each other (one key, one name) are
	// each looked at once: the walk ends, and finds no db certificate.
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var loop []*x509.Certificate
	for range maxCarried {
		loop = append(loop, certify(t, "loop", k, nil, nil))
	}
	if got := on(&Database{Certs: []*x509.Certificate{other}}, nil).Check(loop[0], loop); got != Untrusted {
		t.Errorf("%d certificates issuing each other: %d, want Untrusted", len(loop), got)
	}
	if got := on(&Database{Certs: []*x509.Certificate{loop[5]}}, nil).Check(loop[0], loop); got != Trusted {
		t.Errorf("%d certificates issuing each other, one in db: %d, want Trusted", len(loop), got)
	}
	if got := on(&Database{Certs: []*x509.Certificate{other}}, nil).Check(loop[0], append(loop, leaf)); got != TrustUnknown {
		t.Errorf("more than %d certificates carried: %d, want TrustUnknown", maxCarried, got)
	}

	// A certificate whose issuer name matches but whose key did not sign
	// it leads nowhere.
	impostor, _ := issue(t, "fleet intermediate", nil, nil) // same name as mid, another key
	if got := on(&Database{Certs: []*x509.Certificate{impostor}}, nil).Check(leaf, nil); got != Untrusted {
		t.Errorf("issuer of the same name, another key: %d, want Untrusted", got)
	}
}

func TestReadFirmware(t *testing.T) {
	if fw, err := ReadFirmware(filepath.Join(t.TempDir(), "efivars")); fw != nil || err != nil {
		t.Errorf("no EFI variables: %+v, %v; want nil, nil", fw, err)
	}
	dir := t.TempDir()
	write := func(name string, vendor GUID, data []byte) {
		t.Helper()
		if err := os.WriteFile(varPath(dir, name, vendor), append([]byte{6, 0, 0, 0}, data...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := ReadFirmware(dir)
	if err != nil || fw == nil || fw.SecureBoot || fw.DB != nil || fw.DBX != nil {
		t.Fatalf("no variables: %+v, %v", fw, err)
	}
	c, _ := issue(t, "fleet db", nil, nil)
	write("SecureBoot", guidGlobal, []byte{1})
	write("db", guidImageSecurityDB, signatureList(guidCertX509, testOwner, c.Raw))
	digest := sha256.Sum256(nil)
	write("dbx", guidImageSecurityDB, signatureList(guidCertSHA256, testOwner, digest[:]))
	fw, err = ReadFirmware(dir)
	if err != nil || !fw.SecureBoot || len(fw.DB.Certs) != 1 || !fw.DB.Certs[0].Equal(c) || len(fw.DBX.Hashes) != 1 {
		t.Fatalf("variables: %+v, %v", fw, err)
	}
	if fw.Check(c, nil) != Trusted {
		t.Errorf("the db's own certificate is not trusted")
	}
	write("SecureBoot", guidGlobal, []byte{0})
	if fw, err := ReadFirmware(dir); err != nil || fw.SecureBoot {
		t.Errorf("SecureBoot 0: %+v, %v", fw, err)
	}
	// Hostile variables: garbled, cut short, a FIFO (never blocks), a
	// directory.
	write("db", guidImageSecurityDB, []byte{1, 2, 3})
	if _, err := ReadFirmware(dir); !errors.Is(err, ErrBadDatabase) {
		t.Errorf("garbled db: %v", err)
	}
	if err := os.WriteFile(varPath(dir, "db", guidImageSecurityDB), []byte{6, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFirmware(dir); err == nil {
		t.Errorf("a db of 2 bytes was read")
	}
	os.Remove(varPath(dir, "db", guidImageSecurityDB))
	if err := syscall.Mkfifo(varPath(dir, "db", guidImageSecurityDB), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFirmware(dir); err == nil {
		t.Errorf("a FIFO was read as the db")
	}
	if _, err := ReadFirmware(varPath(dir, "SecureBoot", guidGlobal)); err == nil {
		t.Errorf("a file was read as the variables' directory")
	}
}
