package efivars

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrBadDatabase is wrapped by ParseDatabase's error for bytes that are
// not a sequence of EFI_SIGNATURE_LISTs.
var ErrBadDatabase = errors.New("not an EFI signature database")

// guidCertX509SHA256 is EFI_CERT_X509_SHA256_GUID: entries that revoke a
// certificate by the SHA-256 of its to-be-signed part (dbx).
var guidCertX509SHA256 = mustGUID("3bd2a492-96c0-4079-b420-fcf98ef103ed")

// Database is what a signature database variable (db, dbx) holds, as
// ParseDatabase reads it: the entries of the types the firmware checks
// signed kernel images against.
type Database struct {
	// Certs are the X.509 certificates (EFI_CERT_X509_GUID).
	Certs []*x509.Certificate
	// Hashes are image digests (EFI_CERT_SHA256_GUID): an image whose
	// Authenticode SHA-256 is listed is trusted (db) or refused (dbx)
	// whoever signed it.
	Hashes [][32]byte
	// CertHashes are certificates named by the SHA-256 of their
	// to-be-signed part (EFI_CERT_X509_SHA256_GUID, found in dbx).
	CertHashes [][32]byte
	// Other counts entries of other types (other digests, RSA keys),
	// which ParseDatabase does not read.
	Other int
}

// maxDatabase bounds a signature database: the firmware's own limit on a
// variable is a few tens of KiB.
const maxDatabase = 1 << 20

// ParseDatabase reads the EFI_SIGNATURE_LISTs of a db or dbx variable's
// data (without efivarfs's 4 attribute bytes). The data is hostile: every
// size is bounded by what is left, and a list that does not add up is an
// error, never a panic. A certificate that does not parse is an error
// too: the firmware would skip it, and what it trusts would then be
// guessed.
func ParseDatabase(b []byte) (*Database, error) {
	if len(b) > maxDatabase {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadDatabase, len(b), maxDatabase)
	}
	le := binary.LittleEndian
	d := &Database{}
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < sigListHeader {
			return nil, fmt.Errorf("%w: %d bytes after the last list at %d", ErrBadDatabase, len(rest), off)
		}
		var typ GUID
		copy(typ[:], rest)
		listSize, hdrSize, sigSize := le.Uint32(rest[16:]), le.Uint32(rest[20:]), le.Uint32(rest[24:])
		if uint64(listSize) > uint64(len(rest)) || uint64(listSize) < uint64(sigListHeader)+uint64(hdrSize) {
			return nil, fmt.Errorf("%w: list at %d: size %d, header %d, %d bytes left", ErrBadDatabase, off, listSize, hdrSize, len(rest))
		}
		entries := listSize - sigListHeader - hdrSize
		if sigSize <= sigOwnerSize || entries%sigSize != 0 {
			return nil, fmt.Errorf("%w: list at %d: %d bytes of entries of %d bytes each", ErrBadDatabase, off, entries, sigSize)
		}
		data := rest[sigListHeader+hdrSize : listSize]
		for i := 0; i < len(data); i += int(sigSize) {
			e := data[i+sigOwnerSize : i+int(sigSize)]
			switch typ {
			case guidCertX509:
				// The certificate's own DER length, not the entry's:
				// firmware setups pad entries, and the firmware reads
				// the certificate alone.
				der := e
				var raw asn1.RawValue
				if rest, err := asn1.Unmarshal(e, &raw); err == nil {
					der = e[:len(e)-len(rest)]
				}
				c, err := x509.ParseCertificate(der)
				if err != nil {
					return nil, fmt.Errorf("%w: list at %d: certificate %d: %v", ErrBadDatabase, off, i/int(sigSize)+1, err)
				}
				d.Certs = append(d.Certs, c)
			case guidCertSHA256:
				if len(e) != 32 {
					return nil, fmt.Errorf("%w: list at %d: a SHA-256 entry of %d bytes", ErrBadDatabase, off, len(e))
				}
				d.Hashes = append(d.Hashes, [32]byte(e))
			case guidCertX509SHA256:
				// The digest, then the time of revocation (EFI_TIME).
				if len(e) != 32+16 {
					return nil, fmt.Errorf("%w: list at %d: an X.509 SHA-256 entry of %d bytes", ErrBadDatabase, off, len(e))
				}
				d.CertHashes = append(d.CertHashes, [32]byte(e[:32]))
			default:
				d.Other++
			}
		}
		off += int(listSize)
	}
	return d, nil
}
