package secureboot

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/pe"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/efivars"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/uki"
)

const stubPath = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

func keyPair(t *testing.T, dir, name string) (keyPath, certPath string) {
	return testenv.SecureBootKey(t, dir, name)
}

func mustPKCS8(t *testing.T, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func selfSigned(t *testing.T, priv, pub any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "strata test db"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadSigner(t *testing.T) {
	dir := t.TempDir()
	key, cert := keyPair(t, dir, "db")
	s, err := LoadSigner(key, cert)
	if err != nil {
		t.Fatal(err)
	}
	if s.Certificate().Subject.CommonName != "strata test db" {
		t.Errorf("certificate %v", s.Certificate().Subject)
	}
	// PKCS#1 works too.
	blk, _ := pem.Decode(must(os.ReadFile(key)))
	pk, _ := x509.ParsePKCS8PrivateKey(blk.Bytes)
	pkcs1 := filepath.Join(dir, "pkcs1.key")
	writePEM(t, pkcs1, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(pk.(*rsa.PrivateKey)))
	if _, err := LoadSigner(pkcs1, cert); err != nil {
		t.Errorf("PKCS#1 key: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLoadSignerRefuses(t *testing.T) {
	dir := t.TempDir()
	key, cert := keyPair(t, dir, "db")
	otherKey, otherCert := keyPair(t, dir, "other")
	_ = otherCert

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecKey := filepath.Join(dir, "ec.key")
	ecCert := filepath.Join(dir, "ec.crt")
	writePEM(t, ecKey, "PRIVATE KEY", mustPKCS8(t, ec))
	writePEM(t, ecCert, "CERTIFICATE", selfSigned(t, ec, &ec.PublicKey))

	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	smallCert := filepath.Join(dir, "small.crt")
	writePEM(t, smallCert, "CERTIFICATE", selfSigned(t, small, &small.PublicKey))

	encrypted := filepath.Join(dir, "enc.key")
	writePEM(t, encrypted, "ENCRYPTED PRIVATE KEY", []byte("opaque"))
	two := filepath.Join(dir, "two.crt")
	if err := os.WriteFile(two, append(must(os.ReadFile(cert)), must(os.ReadFile(otherCert))...), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, key, cert, msg string
	}{
		{"key of another certificate", otherKey, cert, "not the key of certificate"},
		{"EC certificate", ecKey, ecCert, "firmware verifies RSA"},
		{"RSA-1024", key, smallCert, "RSA-1024"},
		{"encrypted key", encrypted, cert, "encrypted"},
		{"two certificates", key, two, "more than one"},
		{"key is a FIFO", fifo, cert, "not a regular file"},
		{"certificate is a FIFO", key, fifo, "not a regular file"},
		{"garbage key", garbage, cert, "no PEM block"},
		{"garbage certificate", key, garbage, "no PEM CERTIFICATE"},
		{"missing key", filepath.Join(dir, "absent"), cert, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadSigner(c.key, c.cert)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
}

// testUKI builds a UKI from systemd's stub into dir.
func testUKI(t *testing.T, dir, cmdline string) string {
	t.Helper()
	stub, err := os.ReadFile(stubPath)
	if err != nil {
		t.Fatal(err)
	}
	kernel := bytes.Repeat([]byte("not a kernel "), 5000)
	var out bytes.Buffer
	err = uki.Build(&out, stub, uki.Parts{
		OSRelease: []byte("ID=strata\nVERSION_ID=1\n"), Cmdline: cmdline,
		Initrd: strings.NewReader("initrd"), InitrdSize: 6, Kernel: bytes.NewReader(kernel), KernelSize: int64(len(kernel)),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "test.efi")
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSign signs a UKI with sbsign and checks what a firmware checks: the
// signature verifies against the certificate, not against another one,
// and not once a byte of the command line has changed.
func TestSign(t *testing.T) {
	testenv.RequireTools(t, []string{"sbsign", "sbverify", stubPath})
	ctx := context.Background()
	dir := t.TempDir()
	key, cert := keyPair(t, dir, "db")
	otherKey, otherCert := keyPair(t, dir, "other")
	s, err := LoadSigner(key, cert)
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadSigner(otherKey, otherCert)
	if err != nil {
		t.Fatal(err)
	}
	in := testUKI(t, dir, "root=/dev/mapper/strata-root strata.verity=0123")
	signed := filepath.Join(dir, "signed.efi")
	if err := s.Sign(ctx, in, signed); err != nil {
		t.Fatal(err)
	}
	info, err := uki.ReadInfo(must(os.Open(signed)), must(os.Stat(signed)).Size())
	if err != nil || !info.Signed || info.Cmdline != "root=/dev/mapper/strata-root strata.verity=0123" {
		t.Fatalf("signed UKI: %+v, %v", info, err)
	}
	if err := other.Verify(ctx, signed); !errors.Is(err, ErrSignature) {
		t.Errorf("verified against another certificate: %v", err)
	}
	if err := s.Sign(ctx, signed, filepath.Join(dir, "twice.efi")); err == nil || !strings.Contains(err.Error(), "already signed") {
		t.Errorf("signing a signed binary: %v", err)
	}

	// One byte of the command line changed.
	img := must(os.ReadFile(signed))
	f := must(pe.NewFile(bytes.NewReader(img)))
	sec := f.Section(uki.SectionCmdline)
	img[int(sec.Offset)+strings.Index(info.Cmdline, "0123")] ^= 1
	tampered := filepath.Join(dir, "tampered.efi")
	if err := os.WriteFile(tampered, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, tampered); !errors.Is(err, ErrSignature) {
		t.Errorf("a changed command line verified: %v", err)
	}
}

// TestEnrollOVMF enrolls a PK, a KEK and a db into Debian's empty OVMF
// store: each variable holds its certificate, and Secure Boot is on.
func TestEnrollOVMF(t *testing.T) {
	testenv.RequireTools(t, []string{DefaultOVMFVars})
	dir := t.TempDir()
	_, pk := keyPair(t, dir, "pk")
	_, kek := keyPair(t, dir, "kek")
	_, db := keyPair(t, dir, "db")
	out := filepath.Join(dir, "vars.fd")
	if err := EnrollOVMF(OVMFVars{Out: out, PK: pk, KEK: []string{kek}, DB: []string{db}}); err != nil {
		t.Fatal(err)
	}
	vars, err := efivars.List(must(os.ReadFile(out)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, v := range vars {
		got[v.Name] = v.Data
	}
	for name, cert := range map[string]string{"PK": pk, "KEK": kek, "db": db} {
		c, err := ReadCertificate(cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(got[name], c.Raw) {
			t.Errorf("%s does not hold its certificate", name)
		}
	}
	if !bytes.Equal(got["SecureBootEnable"], []byte{1}) {
		t.Errorf("SecureBootEnable = %v", got["SecureBootEnable"])
	}
	// Nothing is written when a certificate is refused.
	bad := filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(bad, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "vars2.fd")
	if err := EnrollOVMF(OVMFVars{Out: out2, PK: pk, KEK: []string{kek}, DB: []string{bad}}); err == nil {
		t.Fatal("a garbage db certificate was enrolled")
	}
	if _, err := os.Stat(out2); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused enrollment wrote %s", out2)
	}
}
