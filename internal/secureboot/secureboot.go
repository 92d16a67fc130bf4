package secureboot

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"debug/pe"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
)

// ErrKey reports a key or certificate that cannot sign for Secure Boot.
var ErrKey = errors.New("unusable Secure Boot key")

// ErrSignature reports a signed binary that does not verify against the
// certificate.
var ErrSignature = errors.New("the Secure Boot signature does not verify")

// maxPEM bounds the key and certificate files read.
const maxPEM = 64 << 10

// The RSA key sizes accepted: what firmware verifies (edk2 takes 2048
// to 4096 bits).
const (
	minRSABits = 2048
	maxRSABits = 4096
)

// Signer signs EFI binaries with a db key and its certificate.
type Signer struct {
	keyPath, certPath string
	keyPEM, certPEM   []byte
	cert              *x509.Certificate
}

// LoadSigner reads a db key (PEM, PKCS#1 or PKCS#8, unencrypted RSA) and
// its certificate (PEM), and checks that the key is the certificate's.
// sbsign would prompt for the passphrase of an encrypted key, so one is
// refused; so is anything but RSA, which is what firmware verifies.
func LoadSigner(keyPath, certPath string) (*Signer, error) {
	cert, certPEM, err := readCert(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := safefile.ReadFollow(keyPath, maxPEM)
	if err != nil {
		return nil, fmt.Errorf("secure boot key: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("secure boot key %s: %w", keyPath, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("secure boot key %s is not the key of certificate %s: %w", keyPath, certPath, ErrKey)
	}
	return &Signer{keyPath: keyPath, certPath: certPath, keyPEM: keyPEM, certPEM: certPEM, cert: cert}, nil
}

// Certificate is the signer's certificate, which firmware must have in
// its db.
func (s *Signer) Certificate() *x509.Certificate { return s.cert }

// ReadCertificate reads a certificate to enroll (PEM); only RSA
// certificates are accepted, as firmware verifies only those.
func ReadCertificate(path string) (*x509.Certificate, error) {
	c, _, err := readCert(path)
	return c, err
}

func readCert(path string) (*x509.Certificate, []byte, error) {
	raw, err := safefile.ReadFollow(path, maxPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("secure boot certificate: %w", err)
	}
	blk, rest := pem.Decode(raw)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("secure boot certificate %s: no PEM CERTIFICATE block: %w", path, ErrKey)
	}
	if b, _ := pem.Decode(rest); b != nil {
		return nil, nil, fmt.Errorf("secure boot certificate %s: more than one PEM block (give one certificate): %w", path, ErrKey)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("secure boot certificate %s: %v: %w", path, err, ErrKey)
	}
	pub, ok := c.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, nil, fmt.Errorf("secure boot certificate %s: a %s key; firmware verifies RSA: %w", path, c.PublicKeyAlgorithm, ErrKey)
	}
	if n := pub.N.BitLen(); n < minRSABits || n > maxRSABits {
		return nil, nil, fmt.Errorf("secure boot certificate %s: RSA-%d; firmware verifies %d to %d bits: %w", path, n, minRSABits, maxRSABits, ErrKey)
	}
	return c, pem.EncodeToMemory(blk), nil
}

func parseKey(raw []byte) (*rsa.PrivateKey, error) {
	blk, _ := pem.Decode(raw)
	if blk == nil {
		return nil, fmt.Errorf("no PEM block: %w", ErrKey)
	}
	//lint:ignore SA1019 an encrypted PEM key is detected only to refuse it.
	if blk.Type == "ENCRYPTED PRIVATE KEY" || x509.IsEncryptedPEMBlock(blk) {
		return nil, fmt.Errorf("the key is encrypted; give an unencrypted key (sbsign would prompt for the passphrase): %w", ErrKey)
	}
	var k crypto.PrivateKey
	var err error
	switch blk.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block; want an RSA private key: %w", blk.Type, ErrKey)
	}
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrKey)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T; firmware verifies RSA: %w", k, ErrKey)
	}
	return rk, nil
}

// Sign signs the unsigned EFI binary in with sbsign, writes it to out (a
// new file) and checks the result with sbverify against the
// certificate. A binary that already has a signature is refused: a
// second one would not replace it.
func (s *Signer) Sign(ctx context.Context, in, out string) error {
	if err := checkUnsigned(in); err != nil {
		return err
	}
	if err := s.run(ctx, "sbsign", "--key", "/dev/fd/3", "--cert", "/dev/fd/4", "--output", out, in); err != nil {
		return fmt.Errorf("signing %s: %w", in, err)
	}
	if err := s.Verify(ctx, out); err != nil {
		os.Remove(out)
		return err
	}
	return nil
}

// Verify checks that the EFI binary at path carries a signature by the
// signer's certificate (sbverify).
func (s *Signer) Verify(ctx context.Context, path string) error {
	if err := s.run(ctx, "sbverify", "--cert", "/dev/fd/3", path); err != nil {
		return fmt.Errorf("%s: %w: %v", path, ErrSignature, err)
	}
	return nil
}

// run runs an sbsigntool program with the key (as /dev/fd/3, if the
// arguments name it) and the certificate (/dev/fd/3 or 4) on pipes.
func (s *Signer) run(ctx context.Context, name string, args ...string) error {
	var feeds [][]byte
	if name == "sbsign" {
		feeds = [][]byte{s.keyPEM, s.certPEM}
	} else {
		feeds = [][]byte{s.certPEM}
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var writers []*os.File
	for _, b := range feeds {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
		writers = append(writers, w)
		go func(w *os.File, b []byte) {
			defer w.Close()
			_, _ = w.Write(b)
		}(w, b)
	}
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	err := cmd.Run()
	for _, w := range writers {
		w.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(outBuf.String()))
	}
	return nil
}

// maxEFI bounds the binaries Sign reads the headers of.
const maxEFI = 1 << 30

// checkUnsigned refuses a file that is not a PE image or already has a
// certificate table.
func checkUnsigned(path string) error {
	f, err := safefile.OpenFollow(path)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("signing %s: %w", path, err)
	}
	if fi.Size() > maxEFI {
		return fmt.Errorf("signing %s: %d bytes, over %d", path, fi.Size(), int64(maxEFI))
	}
	p, err := pe.NewFile(io.NewSectionReader(f, 0, fi.Size()))
	if err != nil {
		return fmt.Errorf("signing %s: not a PE image: %v", path, err)
	}
	defer p.Close()
	oh, ok := p.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		return fmt.Errorf("signing %s: not a PE32+ image", path)
	}
	if len(oh.DataDirectory) > 4 && oh.DataDirectory[4].Size != 0 {
		return fmt.Errorf("signing %s: already signed (sign the unsigned binary)", path)
	}
	return nil
}
