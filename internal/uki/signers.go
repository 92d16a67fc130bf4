package uki

import (
	"bytes"
	"crypto/x509"
	"debug/pe"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// maxCertTable bounds the certificate table Signers reads: a few
// signatures with their certificate chains.
const maxCertTable = 1 << 20

// winCertPKCS7 is WIN_CERT_TYPE_PKCS_SIGNED_DATA, an Authenticode
// signature.
const winCertPKCS7 = 0x0002

// ErrNoSignature reports a PE file with no Authenticode signature
// Signers can read.
var ErrNoSignature = errors.New("no Authenticode signature")

// Signers returns the certificate of the signer of each Authenticode
// signature in the PE file r (size bytes), as the signature names it
// (issuer and serial number) among the certificates it carries. It does
// not check the signatures: that is the firmware's job (or sbverify's);
// it tells which key claims to have signed, so that an image signed with
// another key than the one the firmware is known to trust can be refused
// before it is installed.
func Signers(r io.ReaderAt, size int64) ([]*x509.Certificate, error) {
	sigs, err := ReadSignatures(r, size)
	if err != nil {
		return nil, err
	}
	return sigs.Signers(), nil
}

// Signature is one Authenticode signature of a PE file, as
// ReadSignatures reads it: the certificate of the signer it names, and
// every certificate it carries (the signer's among them), from which a
// chain to a certificate the firmware trusts is built.
type Signature struct {
	Signer *x509.Certificate
	Certs  []*x509.Certificate
}

// Signatures are the Authenticode signatures of one PE file.
type Signatures []Signature

// Signers returns the signer's certificate of each signature.
func (sigs Signatures) Signers() []*x509.Certificate {
	out := make([]*x509.Certificate, len(sigs))
	for i, s := range sigs {
		out[i] = s.Signer
	}
	return out
}

// ReadSignatures returns the Authenticode signatures of the PE file r
// (size bytes), as Signers reads them, checking none.
func ReadSignatures(r io.ReaderAt, size int64) (Signatures, error) {
	f, err := pe.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotUKI, err)
	}
	defer f.Close()
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok || len(oh.DataDirectory) <= dirSecurity || oh.DataDirectory[dirSecurity].Size == 0 {
		return nil, ErrNoSignature
	}
	d := oh.DataDirectory[dirSecurity]
	// The security directory's address is a file offset.
	if d.Size > maxCertTable || int64(d.VirtualAddress)+int64(d.Size) > size {
		return nil, fmt.Errorf("%w: a certificate table of %d bytes at %d in a file of %d", ErrNotUKI, d.Size, d.VirtualAddress, size)
	}
	table := make([]byte, d.Size)
	if _, err := r.ReadAt(table, int64(d.VirtualAddress)); err != nil {
		return nil, fmt.Errorf("reading the certificate table: %w", err)
	}
	var out Signatures
	for len(table) >= 8 {
		n := binary.LittleEndian.Uint32(table)
		typ := binary.LittleEndian.Uint16(table[6:])
		if n < 8 || int64(n) > int64(len(table)) {
			return nil, fmt.Errorf("%w: a certificate entry of %d bytes in a table of %d", ErrNotUKI, n, len(table))
		}
		if typ == winCertPKCS7 {
			s, err := pkcs7Signature(table[8:n])
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		next := (int64(n) + 7) &^ 7 // entries are 8-byte aligned
		if next >= int64(len(table)) {
			break
		}
		table = table[next:]
	}
	if len(out) == 0 {
		return nil, ErrNoSignature
	}
	return out, nil
}

// PKCS #7 SignedData, as far as Signers reads it.
type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,tag:0"`
}

type signedData struct {
	Version          int
	DigestAlgorithms asn1.RawValue
	ContentInfo      asn1.RawValue
	Certificates     asn1.RawValue   `asn1:"optional,tag:0"`
	CRLs             asn1.RawValue   `asn1:"optional,tag:1"`
	SignerInfos      []asn1.RawValue `asn1:"set"`
}

// signerHead is the start of a SignerInfo: encoding/asn1 leaves the
// fields after it (algorithms, attributes, the signature) unread.
type signerHead struct {
	Version int
	Issuer  issuerAndSerial
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

var oidSignedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}

// pkcs7Signature returns the certificate the first SignerInfo of the
// SignedData in der that names one by issuer and serial number names
// (one naming its key by identifier instead is passed over), and the
// certificates der carries.
func pkcs7Signature(der []byte) (Signature, error) {
	var ci contentInfo
	if _, err := asn1.Unmarshal(der, &ci); err != nil || !ci.ContentType.Equal(oidSignedData) {
		return Signature{}, fmt.Errorf("%w: the signature is not PKCS #7 signed data (%v)", ErrNotUKI, err)
	}
	var sd signedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return Signature{}, fmt.Errorf("%w: the signature's signed data: %v", ErrNotUKI, err)
	}
	certs, err := x509.ParseCertificates(sd.Certificates.Bytes)
	if err != nil {
		return Signature{}, fmt.Errorf("%w: the signature's certificates: %v", ErrNotUKI, err)
	}
	for _, raw := range sd.SignerInfos {
		var h signerHead
		if _, err := asn1.Unmarshal(raw.FullBytes, &h); err != nil || h.Issuer.Serial == nil {
			continue
		}
		for _, c := range certs {
			if bytes.Equal(c.RawIssuer, h.Issuer.Issuer.FullBytes) && c.SerialNumber.Cmp(h.Issuer.Serial) == 0 {
				return Signature{Signer: c, Certs: certs}, nil
			}
		}
	}
	return Signature{}, fmt.Errorf("%w: the signature names no signer whose certificate it carries", ErrNotUKI)
}
