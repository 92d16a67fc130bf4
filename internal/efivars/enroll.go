package efivars

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrEnrolled is wrapped by Enroll's error for a store that already
// holds one of the variables it writes (PK, KEK or db): Enroll never
// replaces keys.
var ErrEnrolled = errors.New("the store already holds Secure Boot keys")

// ErrNoSpace is wrapped by Enroll's error when the variables do not fit:
// the store's free space is too small, or a variable would be larger
// than the firmware takes.
var ErrNoSpace = errors.New("no room in the variable store")

// ErrInvalidKeys is wrapped by Enroll's error for keys it will not
// enroll: a missing certificate, one that does not parse, one whose
// public key is not RSA, no owner GUID, a time EFI_TIME cannot hold.
var ErrInvalidKeys = errors.New("invalid Secure Boot keys")

// Keys are the certificates (DER X.509) to enroll, and the GUID that
// owns their signature list entries.
type Keys struct {
	// PK is the platform key's certificate.
	PK []byte
	// KEK are the key exchange keys' certificates, one or more.
	KEK [][]byte
	// DB are the certificates of the signature database, one or more:
	// the firmware runs an EFI image signed by one of them.
	DB [][]byte
	// Owner is the SignatureOwner of every entry (the dummy dbx entry's
	// too); it must not be zero.
	Owner GUID
	// Time is the timestamp of the authenticated variables (PK, KEK,
	// db, dbx), taken in UTC without the fraction of a second. The zero
	// value means 1970-01-01 00:00:00 UTC, so that the same keys give
	// the same bytes: the firmware takes an update signed by the PK or a
	// KEK only if its timestamp is later than the variable's, and the
	// earliest fixed time refuses none. (Debian's snakeoil store has its
	// build's time, 2025-03-10 02:53:48.)
	Time time.Time
}

// Attributes (EFI_VARIABLE_*).
const (
	attrNonVolatile   = 0x01
	attrBootService   = 0x02
	attrRuntime       = 0x04
	attrTimeBasedAuth = 0x20

	// attrKeys are the attributes of PK, KEK, db and dbx.
	attrKeys = attrNonVolatile | attrBootService | attrRuntime | attrTimeBasedAuth
	// attrSettings are the attributes of SecureBootEnable and
	// CustomMode, which only the firmware (boot services) sees.
	attrSettings = attrNonVolatile | attrBootService
)

// defaultTime is the timestamp Keys.Time defaults to.
var defaultTime = time.Unix(0, 0).UTC()

// sigListHeader is the size of EFI_SIGNATURE_LIST before its entries;
// each entry (EFI_SIGNATURE_DATA) starts with its owner GUID.
const (
	sigListHeader = 28
	sigOwnerSize  = 16
)

// record is a variable Enroll writes.
type record struct {
	name   string
	vendor GUID
	attrs  uint32
	time   [16]byte
	data   []byte
}

// varID names a variable.
type varID struct {
	name   string
	vendor GUID
}

// Enroll returns a copy of store, an OVMF variable store flash image
// (OVMF_VARS_4M.fd), with the keys k enrolled, so that OVMF's Secure Boot
// firmware boots in user mode with Secure Boot on. It refuses a store
// that already holds a PK, KEK or db (ErrEnrolled) and leaves store
// itself unchanged.
//
// It appends these records to the free space, in the order and with the
// attributes Debian's OVMF_VARS_4M.snakeoil.fd has them (its build ran
// edk2's EnrollDefaultKeys in a VM to make it):
//
//   - db: one X.509 signature list per certificate of k.DB (lists of
//     X.509 entries cannot share a list when their sizes differ);
//   - dbx: one SHA-256 entry, the digest of no bytes, which no image has,
//     unless the store has a dbx already. Nothing needs a dbx to boot;
//     EnrollDefaultKeys and virt-fw-vars write this placeholder so that
//     the variable exists, and so does Enroll: the result is the store
//     those tools make, and an OS that manages dbx finds one;
//   - KEK: one X.509 list per certificate of k.KEK;
//   - PK: one X.509 list of the one certificate k.PK. A PK is what puts
//     the firmware in user mode (SetupMode 0). (EnrollDefaultKeys gives
//     the PK's entry the owner EFI_GLOBAL_VARIABLE, its other entries
//     its own GUID; Enroll gives every entry k.Owner. The firmware does
//     not read owners.)
//   - SecureBootEnable (edk2's gEfiSecureBootEnableDisableGuid) = 1:
//     the firmware turns Secure Boot on (SecureBoot 1) in user mode when
//     this is 1, and creates it as 1 at the first boot with a PK if it is
//     missing; written anyway, as the snakeoil store and
//     `virt-fw-vars --secure-boot` have it, so that the state does not
//     depend on that default;
//   - CustomMode (gEfiCustomModeEnableGuid) = 0: standard mode, where
//     key updates must be signed. The firmware resets it to 0 at every
//     boot; written as the reference stores have it.
//
// A live SecureBootEnable or CustomMode already in the store is marked
// deleted (state 0x3C), as the firmware marks a replaced copy.
//
// What else the snakeoil store holds was written by the firmware itself
// while EnrollDefaultKeys ran in a VM, and the firmware recreates it at
// the next boot: certdb (the empty list of signers of private
// authenticated variables), VendorKeysNv (0 there: keys changed from the
// vendor's; missing, the firmware creates it as 1, which only sets the
// informational VendorKeys variable), MTC (the monotonic counter), boot
// options, console paths, iSCSI attempts, MemoryTypeInformation. Enroll
// writes none of them.
func Enroll(store []byte, k Keys) ([]byte, error) {
	ts, err := efiTime(k.Time)
	if err != nil {
		return nil, err
	}
	pk, kek, db, err := k.lists()
	if err != nil {
		return nil, err
	}
	l, err := parse(store)
	if err != nil {
		return nil, err
	}

	refuse := []varID{{"PK", guidGlobal}, {"KEK", guidGlobal}, {"db", guidImageSecurityDB}}
	replace := []varID{{"SecureBootEnable", guidSecureBootEnable}, {"CustomMode", guidCustomMode}}
	dbx := varID{"dbx", guidImageSecurityDB}
	haveDBX := false
	var superseded []int
	for _, v := range l.vars {
		if !v.Live() {
			continue
		}
		id := varID{v.Name, v.Vendor}
		for _, r := range refuse {
			if id == r {
				return nil, fmt.Errorf("ovmf vars: the store already has a %s variable (at %#x); enroll into an unenrolled store (OVMF_VARS_4M.fd): %w", v.Name, v.Offset, ErrEnrolled)
			}
		}
		for _, r := range replace {
			if id == r {
				superseded = append(superseded, v.Offset)
			}
		}
		if id == dbx {
			haveDBX = true
		}
	}

	recs := []record{{name: "db", vendor: guidImageSecurityDB, attrs: attrKeys, time: ts, data: db}}
	if !haveDBX {
		recs = append(recs, record{name: "dbx", vendor: guidImageSecurityDB, attrs: attrKeys, time: ts, data: dummyDBX(k.Owner)})
	}
	recs = append(recs,
		record{name: "KEK", vendor: guidGlobal, attrs: attrKeys, time: ts, data: kek},
		record{name: "PK", vendor: guidGlobal, attrs: attrKeys, time: ts, data: pk},
		record{name: "SecureBootEnable", vendor: guidSecureBootEnable, attrs: attrSettings, data: []byte{1}},
		record{name: "CustomMode", vendor: guidCustomMode, attrs: attrSettings, data: []byte{0}},
	)

	offs := make([]int, len(recs))
	off := l.free
	for i, r := range recs {
		size := r.size()
		if size > l.maxVar {
			return nil, fmt.Errorf("ovmf vars: variable %s would be %d bytes; OVMF takes at most %d in a store of this size: %w", r.name, size, l.maxVar, ErrNoSpace)
		}
		off = alignUp(off)
		if off > l.varsEnd || size > l.varsEnd-off {
			return nil, fmt.Errorf("ovmf vars: variable %s (%d bytes) does not fit: the store's free space is %#x-%#x: %w", r.name, size, l.free, l.varsEnd, ErrNoSpace)
		}
		offs[i] = off
		off += size
	}

	out := bytes.Clone(store)
	for _, o := range superseded {
		out[o+2] &= stateInDeletedTransition & stateDeleted
	}
	for i, r := range recs {
		r.put(out[offs[i] : offs[i]+r.size()])
	}
	return out, nil
}

// lists checks k and returns the data of PK, KEK and db.
func (k Keys) lists() (pk, kek, db []byte, err error) {
	if k.Owner == (GUID{}) {
		return nil, nil, nil, fmt.Errorf("ovmf vars: no owner GUID for the keys: %w", ErrInvalidKeys)
	}
	if len(k.PK) == 0 {
		return nil, nil, nil, fmt.Errorf("ovmf vars: no PK certificate: %w", ErrInvalidKeys)
	}
	if pk, err = x509Lists(k.Owner, "PK", [][]byte{k.PK}); err != nil {
		return nil, nil, nil, err
	}
	if kek, err = x509Lists(k.Owner, "KEK", k.KEK); err != nil {
		return nil, nil, nil, err
	}
	if db, err = x509Lists(k.Owner, "db", k.DB); err != nil {
		return nil, nil, nil, err
	}
	return pk, kek, db, nil
}

// x509Lists returns one EFI_SIGNATURE_LIST of type EFI_CERT_X509_GUID per
// certificate, each with the one entry (owner, certificate), after
// checking that each certificate parses and has an RSA key: edk2 refuses
// to enroll an X.509 list whose certificate has no RSA public key
// (CheckSignatureListFormat) and verifies signatures with RSA keys only.
func x509Lists(owner GUID, name string, certs [][]byte) ([]byte, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("ovmf vars: no %s certificate: %w", name, ErrInvalidKeys)
	}
	var out []byte
	for i, der := range certs {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("ovmf vars: %s certificate %d: %v: %w", name, i+1, err, ErrInvalidKeys)
		}
		if _, ok := c.PublicKey.(*rsa.PublicKey); !ok {
			return nil, fmt.Errorf("ovmf vars: %s certificate %d (%s) has a %s key; OVMF takes RSA keys only: %w", name, i+1, c.Subject, c.PublicKeyAlgorithm, ErrInvalidKeys)
		}
		// The firmware's own limit (maxVariableSize) is far below
		// this; it only keeps the sizes below in range.
		if len(der) > 1<<20 {
			return nil, fmt.Errorf("ovmf vars: %s certificate %d is %d bytes: %w", name, i+1, len(der), ErrInvalidKeys)
		}
		out = append(out, signatureList(guidCertX509, owner, der)...)
	}
	return out, nil
}

// signatureList returns an EFI_SIGNATURE_LIST of type typ with one entry:
// SignatureType, SignatureListSize, SignatureHeaderSize (0),
// SignatureSize, then the entry's SignatureOwner and data.
func signatureList(typ, owner GUID, data []byte) []byte {
	le := binary.LittleEndian
	b := make([]byte, sigListHeader+sigOwnerSize+len(data))
	copy(b, typ[:])
	le.PutUint32(b[16:], uint32(len(b)))
	le.PutUint32(b[20:], 0)
	le.PutUint32(b[24:], uint32(sigOwnerSize+len(data)))
	copy(b[sigListHeader:], owner[:])
	copy(b[sigListHeader+sigOwnerSize:], data)
	return b
}

// dummyDBX is the placeholder dbx of EnrollDefaultKeys and virt-fw-vars:
// one SHA-256 entry, the digest of no bytes.
func dummyDBX(owner GUID) []byte {
	sum := sha256.Sum256(nil)
	return signatureList(guidCertSHA256, owner, sum[:])
}

// efiTime encodes t as an EFI_TIME in UTC (Year, Month, Day, Hour,
// Minute, Second, Pad1, Nanosecond, TimeZone, Daylight, Pad2), with the
// zero Time meaning defaultTime.
func efiTime(t time.Time) ([16]byte, error) {
	var b [16]byte
	if t.IsZero() {
		t = defaultTime
	}
	t = t.UTC()
	if t.Year() < 1900 || t.Year() > 9999 {
		return b, fmt.Errorf("ovmf vars: timestamp %s: EFI_TIME takes the years 1900-9999: %w", t.Format(time.RFC3339), ErrInvalidKeys)
	}
	binary.LittleEndian.PutUint16(b[0:], uint16(t.Year()))
	b[2] = byte(t.Month())
	b[3] = byte(t.Day())
	b[4] = byte(t.Hour())
	b[5] = byte(t.Minute())
	b[6] = byte(t.Second())
	// Nanosecond, TimeZone (0: UTC), Daylight and the pads stay 0, as
	// the firmware requires of an authenticated variable's timestamp.
	return b, nil
}

// size is the length of the record's header, name and data.
func (r record) size() int {
	return varHeaderSize + len(encodeName(r.name)) + len(r.data)
}

// put writes the record into b, which is r.size() bytes of free space.
func (r record) put(b []byte) {
	le := binary.LittleEndian
	name := encodeName(r.name)
	le.PutUint16(b[0:], startID)
	b[2] = StateAdded
	b[3] = 0
	le.PutUint32(b[4:], r.attrs)
	le.PutUint64(b[8:], 0) // MonotonicCount
	copy(b[16:32], r.time[:])
	le.PutUint32(b[32:], 0) // PubKeyIndex
	le.PutUint32(b[36:], uint32(len(name)))
	le.PutUint32(b[40:], uint32(len(r.data)))
	copy(b[44:60], r.vendor[:])
	copy(b[varHeaderSize:], name)
	copy(b[varHeaderSize+len(name):], r.data)
}
