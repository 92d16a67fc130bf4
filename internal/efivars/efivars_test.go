package efivars

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math/big"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// The layout of OVMF's 4 MiB build: a 0x84000-byte volume whose variable
// store is 0x40000 bytes with the volume header; the fault-tolerant-write
// areas follow.
const (
	testFVLen     = 0x84000
	testStoreSize = 0x40000 - 0x48
	testVarsStart = 0x48 + storeHeaderSize
	testVarsEnd   = 0x48 + testStoreSize
)

var testOwner = mustGUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")

// newStore builds an empty variable store as OVMF's build formats it:
// the firmware volume header with its block map and checksum, the
// variable store header, erased flash. What follows the variable store
// is filled with a pattern (the real file has the FTW working block
// there), which Enroll must not touch.
func newStore(fvLen, storeSize int) []byte {
	le := binary.LittleEndian
	b := bytes.Repeat([]byte{0xFF}, fvLen)
	clear(b[:0x48+storeHeaderSize])
	copy(b[0x10:], guidNVDataFV[:])
	le.PutUint64(b[0x20:], uint64(fvLen))
	copy(b[0x28:], fvSignature)
	le.PutUint32(b[0x2C:], 0x0004FEFF)
	le.PutUint16(b[0x30:], 0x48)
	b[0x37] = fvRevision
	le.PutUint32(b[0x38:], uint32(fvLen/0x1000))
	le.PutUint32(b[0x3C:], 0x1000)
	setChecksum(b)
	copy(b[0x48:], guidAuthVarStore[:])
	le.PutUint32(b[0x48+16:], uint32(storeSize))
	b[0x48+20] = storeFormatted
	b[0x48+21] = storeHealthy
	for i := 0x48 + storeSize; i < fvLen; i++ {
		b[i] = byte(i * 7)
	}
	return b
}

// setChecksum sets the firmware volume header's checksum.
func setChecksum(b []byte) {
	le := binary.LittleEndian
	hl := int(le.Uint16(b[0x30:]))
	le.PutUint16(b[0x32:], 0)
	var sum uint16
	for i := 0; i < hl; i += 2 {
		sum += le.Uint16(b[i:])
	}
	le.PutUint16(b[0x32:], -sum)
}

// addRecord appends a record to store's free space, as the firmware
// would, with the given state.
func addRecord(t testing.TB, store []byte, name string, vendor GUID, attrs uint32, state byte, data []byte) {
	t.Helper()
	l, err := parse(store)
	if err != nil {
		t.Fatal(err)
	}
	r := record{name: name, vendor: vendor, attrs: attrs, data: data}
	r.put(store[l.free : l.free+r.size()])
	store[l.free+2] = state
}

var (
	rsaKeyOnce sync.Once
	rsaKey     *rsa.PrivateKey
)

// newCert returns a self-signed certificate for cn with an RSA key (one
// key for all: generating one is slow), or an ECDSA key if ec.
func newCert(t testing.TB, cn string, ec bool) []byte {
	t.Helper()
	rsaKeyOnce.Do(func() {
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	var priv any = rsaKey
	pub := any(&rsaKey.PublicKey)
	if ec {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// testKeys returns keys of one PK, two KEKs and two db certificates,
// their sizes all different.
func testKeys(t testing.TB) Keys {
	return Keys{
		PK:    newCert(t, "test PK", false),
		KEK:   [][]byte{newCert(t, "test KEK one", false), newCert(t, "test KEK number two", false)},
		DB:    [][]byte{newCert(t, "test db", false), newCert(t, "test db, the second certificate", false)},
		Owner: testOwner,
	}
}

// sigEntry is one entry of a parsed signature list.
type sigEntry struct {
	typ, owner GUID
	data       []byte
}

// parseSigLists parses a signature database strictly: header size 0,
// one entry per list, sizes consistent.
func parseSigLists(t testing.TB, b []byte) []sigEntry {
	t.Helper()
	le := binary.LittleEndian
	var out []sigEntry
	for len(b) > 0 {
		if len(b) < sigListHeader {
			t.Fatalf("signature list header cut short: %d bytes", len(b))
		}
		listSize, hdrSize, sigSize := le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:])
		if hdrSize != 0 || int(listSize) > len(b) || listSize != sigListHeader+sigSize || sigSize < sigOwnerSize {
			t.Fatalf("signature list sizes: list %d, header %d, signature %d, %d bytes left", listSize, hdrSize, sigSize, len(b))
		}
		out = append(out, sigEntry{GUID(b[:16]), GUID(b[28:44]), b[44:listSize]})
		b = b[listSize:]
	}
	return out
}

func TestGUID(t *testing.T) {
	g, err := ParseGUID("8BE4DF61-93CA-11D2-AA0D-00E098032B8C")
	if err != nil {
		t.Fatal(err)
	}
	want := GUID{0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c}
	if g != want || g != guidGlobal {
		t.Fatalf("ParseGUID: % x, want % x", g[:], want[:])
	}
	if s := g.String(); s != "8be4df61-93ca-11d2-aa0d-00e098032b8c" {
		t.Fatalf("String: %s", s)
	}
	for _, bad := range []string{"", "8be4df61-93ca-11d2-aa0d-00e098032b8", "8be4df61-93ca-11d2-aa0d-00e098032b8cc",
		"8be4df61x93ca-11d2-aa0d-00e098032b8c", "8be4df61-93ca-11d2-aa0d-00e098032bzz", "{8be4df61-93ca-11d2-aa0d-00e09803b8c}"} {
		if _, err := ParseGUID(bad); err == nil {
			t.Errorf("ParseGUID(%q) took it", bad)
		}
	}
}

func TestEnroll(t *testing.T) {
	store := newStore(testFVLen, testStoreSize)
	orig := bytes.Clone(store)
	k := testKeys(t)
	out, err := Enroll(store, k)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(store, orig) {
		t.Fatal("Enroll changed its input")
	}
	if len(out) != len(store) {
		t.Fatalf("%d bytes out of %d", len(out), len(store))
	}
	vars, err := List(out)
	if err != nil {
		t.Fatal(err)
	}
	sha := sha256.Sum256(nil)
	type want struct {
		name    string
		vendor  GUID
		attrs   uint32
		entries []sigEntry // nil: data is raw
		raw     []byte
		timed   bool
	}
	x := func(certs ...[]byte) []sigEntry {
		var e []sigEntry
		for _, c := range certs {
			e = append(e, sigEntry{guidCertX509, testOwner, c})
		}
		return e
	}
	wants := []want{
		{"db", guidImageSecurityDB, 0x27, x(k.DB...), nil, true},
		{"dbx", guidImageSecurityDB, 0x27, []sigEntry{{guidCertSHA256, testOwner, sha[:]}}, nil, true},
		{"KEK", guidGlobal, 0x27, x(k.KEK...), nil, true},
		{"PK", guidGlobal, 0x27, x(k.PK), nil, true},
		{"SecureBootEnable", guidSecureBootEnable, 0x03, nil, []byte{1}, false},
		{"CustomMode", guidCustomMode, 0x03, nil, []byte{0}, false},
	}
	if len(vars) != len(wants) {
		t.Fatalf("%d variables, want %d: %+v", len(vars), len(wants), vars)
	}
	// 1970-01-01 00:00:00 UTC as EFI_TIME.
	epoch := [16]byte{0xB2, 0x07, 1, 1}
	off := testVarsStart
	for i, w := range wants {
		v := vars[i]
		if v.Name != w.name || v.Vendor != w.vendor || v.Attributes != w.attrs || v.State != StateAdded || !v.Live() {
			t.Errorf("variable %d: %s %s attrs %#x state %#x, want %s %s attrs %#x state 0x3f", i, v.Name, v.Vendor, v.Attributes, v.State, w.name, w.vendor, w.attrs)
		}
		if v.Offset != off {
			t.Errorf("%s at %#x, want %#x", v.Name, v.Offset, off)
		}
		rec := out[v.Offset : v.Offset+v.Size]
		if id := binary.LittleEndian.Uint16(rec); id != startID || rec[3] != 0 {
			t.Errorf("%s: start id %#x, reserved %#x", v.Name, id, rec[3])
		}
		if mc, pki := binary.LittleEndian.Uint64(rec[8:]), binary.LittleEndian.Uint32(rec[32:]); mc != 0 || pki != 0 {
			t.Errorf("%s: monotonic count %d, public key index %d", v.Name, mc, pki)
		}
		wantTime := [16]byte{}
		if w.timed {
			wantTime = epoch
		}
		if got := [16]byte(rec[16:32]); got != wantTime {
			t.Errorf("%s: timestamp % x, want % x", v.Name, got[:], wantTime[:])
		}
		if ns := binary.LittleEndian.Uint32(rec[36:]); int(ns) != 2*len(w.name)+2 || v.Size != varHeaderSize+int(ns)+len(v.Data) {
			t.Errorf("%s: name size %d, record size %d", v.Name, ns, v.Size)
		}
		if w.entries == nil {
			if !bytes.Equal(v.Data, w.raw) {
				t.Errorf("%s: data % x, want % x", v.Name, v.Data, w.raw)
			}
		} else {
			got := parseSigLists(t, v.Data)
			if len(got) != len(w.entries) {
				t.Fatalf("%s: %d signature lists, want %d", v.Name, len(got), len(w.entries))
			}
			for j := range got {
				g, e := got[j], w.entries[j]
				if g.typ != e.typ || g.owner != e.owner || !bytes.Equal(g.data, e.data) {
					t.Errorf("%s list %d: type %s owner %s %d bytes, want type %s owner %s %d bytes", v.Name, j, g.typ, g.owner, len(g.data), e.typ, e.owner, len(e.data))
				}
			}
		}
		// The padding to the next record stays erased.
		end := v.Offset + v.Size
		off = alignUp(end)
		for p := end; p < off; p++ {
			if out[p] != 0xFF {
				t.Errorf("%s: padding byte %#x is %#x", v.Name, p, out[p])
			}
		}
	}
	// Nothing else changed: the headers, the free space after the
	// records, and the FTW areas after the store.
	if !bytes.Equal(out[:testVarsStart], store[:testVarsStart]) {
		t.Error("the headers changed")
	}
	if !bytes.Equal(out[off:], store[off:]) {
		t.Error("bytes after the new records changed")
	}
}

func TestEnrollDeterministic(t *testing.T) {
	k := testKeys(t)
	a, err := Enroll(newStore(testFVLen, testStoreSize), k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Enroll(newStore(testFVLen, testStoreSize), k)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two enrollments of the same keys differ")
	}
	// An explicit time changes the timestamps, and only them.
	k.Time = time.Date(2025, 3, 10, 2, 53, 48, 999, time.FixedZone("x", 3600))
	c, err := Enroll(newStore(testFVLen, testStoreSize), k)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := List(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xE9, 0x07, 3, 10, 1, 53, 48} // 2025-03-10 01:53:48 UTC
	inTimestamp := map[int]bool{}
	n := 0
	for _, v := range vars {
		if v.Attributes&attrTimeBasedAuth == 0 {
			continue
		}
		n++
		ts := c[v.Offset+16 : v.Offset+32]
		if !bytes.Equal(ts[:7], want) || !bytes.Equal(ts[7:], make([]byte, 9)) {
			t.Errorf("%s: timestamp % x", v.Name, ts)
		}
		for i := v.Offset + 16; i < v.Offset+32; i++ {
			inTimestamp[i] = true
		}
	}
	if n != 4 {
		t.Errorf("%d timestamped variables, want 4", n)
	}
	for i := range a {
		if a[i] != c[i] && !inTimestamp[i] {
			t.Fatalf("byte %#x, outside the timestamps, differs", i)
		}
	}
	if _, err := Enroll(newStore(testFVLen, testStoreSize), Keys{PK: k.PK, KEK: k.KEK, DB: k.DB, Owner: k.Owner, Time: time.Date(1899, 12, 31, 0, 0, 0, 0, time.UTC)}); !errors.Is(err, ErrInvalidKeys) {
		t.Error("a timestamp before 1900 was taken")
	}
}

func TestEnrollRefuses(t *testing.T) {
	k := testKeys(t)
	good := newStore(testFVLen, testStoreSize)
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	withKeys := func(f func(k *Keys)) Keys {
		k2 := k
		k2.KEK = append([][]byte(nil), k.KEK...)
		k2.DB = append([][]byte(nil), k.DB...)
		f(&k2)
		return k2
	}
	enrolled, err := Enroll(good, k)
	if err != nil {
		t.Fatal(err)
	}
	onlyDB := bytes.Clone(good)
	addRecord(t, onlyDB, "db", guidImageSecurityDB, attrKeys, StateAdded, signatureList(guidCertX509, testOwner, k.DB[0]))
	kekInTransition := bytes.Clone(good)
	addRecord(t, kekInTransition, "KEK", guidGlobal, attrKeys, StateAdded&stateInDeletedTransition, signatureList(guidCertX509, testOwner, k.KEK[0]))
	// Room for the header, db and dbx, but not KEK.
	tight := newStore(0x3000, testVarsStart-0x48+3*varHeaderSize+len(signatureList(guidCertX509, testOwner, k.DB[0]))+len(signatureList(guidCertX509, testOwner, k.DB[1]))+len(dummyDBX(testOwner))+20)
	garbage := []byte("-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n")

	for _, c := range []struct {
		name  string
		store []byte
		keys  Keys
		err   error
		msg   string
	}{
		{"empty file", nil, k, ErrNotStore, "shorter than"},
		{"no _FVH", mod(func(b []byte) { b[0x28] = 'X' }), k, ErrNotStore, "signature"},
		{"not the NV data volume", mod(func(b []byte) { b[0x10] ^= 1; setChecksum(b) }), k, ErrNotStore, "file system"},
		{"bad checksum", mod(func(b []byte) { b[0x32]++ }), k, ErrNotStore, "checksum"},
		{"header revision", mod(func(b []byte) { b[0x37] = 1; setChecksum(b) }), k, ErrNotStore, "revision"},
		{"header length", mod(func(b []byte) { b[0x30] = 0x40; setChecksum(b) }), k, ErrNotStore, "header length"},
		{"plain variable store", mod(func(b []byte) { copy(b[0x48:], guidVarStore[:]) }), k, ErrNotStore, "plain variables"},
		{"wrong store GUID", mod(func(b []byte) { b[0x48+15] ^= 0x80 }), k, ErrNotStore, "variable store signature"},
		{"bad format byte", mod(func(b []byte) { b[0x48+20] = 0x5B }), k, ErrNotStore, "format"},
		{"store not healthy", mod(func(b []byte) { b[0x48+21] = 0xFF }), k, ErrNotStore, "state"},
		{"store larger than the volume", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[0x48+16:], testFVLen) }), k, ErrNotStore, "variable store of"},
		{"truncated store", good[:testFVLen/2], k, ErrNotStore, "truncated"},
		{"truncated in the header", good[:0x50], k, ErrNotStore, "truncated"},
		{"no room", tight, k, ErrNoSpace, "variable KEK"},
		{"already enrolled", enrolled, k, ErrEnrolled, "already has a db variable"},
		{"holds db", onlyDB, k, ErrEnrolled, "already has a db variable"},
		{"holds KEK being replaced", kekInTransition, k, ErrEnrolled, "already has a KEK variable"},
		{"no owner", good, withKeys(func(k *Keys) { k.Owner = GUID{} }), ErrInvalidKeys, "owner"},
		{"no PK", good, withKeys(func(k *Keys) { k.PK = nil }), ErrInvalidKeys, "no PK"},
		{"no KEK", good, withKeys(func(k *Keys) { k.KEK = nil }), ErrInvalidKeys, "no KEK"},
		{"empty DB", good, withKeys(func(k *Keys) { k.DB = [][]byte{} }), ErrInvalidKeys, "no db"},
		{"PEM, not DER", good, withKeys(func(k *Keys) { k.PK = garbage }), ErrInvalidKeys, "PK certificate 1"},
		{"truncated certificate", good, withKeys(func(k *Keys) { k.DB[1] = k.DB[1][:len(k.DB[1])-1] }), ErrInvalidKeys, "db certificate 2"},
		{"trailing bytes", good, withKeys(func(k *Keys) { k.KEK[0] = append(bytes.Clone(k.KEK[0]), 0) }), ErrInvalidKeys, "KEK certificate 1"},
		{"empty certificate", good, withKeys(func(k *Keys) { k.KEK[1] = nil }), ErrInvalidKeys, "KEK certificate 2"},
		{"ECDSA key", good, withKeys(func(k *Keys) { k.DB[0] = newCert(t, "ec", true) }), ErrInvalidKeys, "RSA keys only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := Enroll(c.store, c.keys)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if out != nil {
				t.Error("a store returned with the error")
			}
			if !strings.HasPrefix(err.Error(), "ovmf vars: ") || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q: want the prefix \"ovmf vars: \" and %q", err, c.msg)
			}
		})
	}
}

// TestEnrollSettings: a store the firmware has booted holds CustomMode
// (and may hold SecureBootEnable, dbx, deleted copies of keys); Enroll
// replaces the settings, keeps dbx, and ignores deleted records.
func TestEnrollSettings(t *testing.T) {
	k := testKeys(t)
	store := newStore(testFVLen, testStoreSize)
	addRecord(t, store, "PK", guidGlobal, attrKeys, 0x3C, signatureList(guidCertX509, testOwner, k.PK))
	addRecord(t, store, "CustomMode", guidCustomMode, attrSettings, StateAdded, []byte{1})
	addRecord(t, store, "SecureBootEnable", guidSecureBootEnable, attrSettings, StateAdded&stateInDeletedTransition, []byte{0})
	dbx := signatureList(guidCertSHA256, testOwner, bytes.Repeat([]byte{7}, 32))
	addRecord(t, store, "dbx", guidImageSecurityDB, attrKeys, StateAdded, dbx)
	// A variable of the same name under another vendor is not the one.
	addRecord(t, store, "KEK", testOwner, 0x07, StateAdded, []byte("x"))
	out, err := Enroll(store, k)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := List(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vars {
		s := v.Name
		if v.Live() {
			s += "+"
		}
		got = append(got, s)
		if v.Name == "dbx" && !bytes.Equal(v.Data, dbx) {
			t.Error("dbx replaced")
		}
		if v.Live() && v.Name == "SecureBootEnable" && v.Data[0] != 1 || v.Live() && v.Name == "CustomMode" && v.Data[0] != 0 {
			t.Errorf("live %s = %d", v.Name, v.Data[0])
		}
	}
	want := "PK CustomMode SecureBootEnable dbx+ KEK+ db+ KEK+ PK+ SecureBootEnable+ CustomMode+"
	if strings.Join(got, " ") != want {
		t.Errorf("records %s, want %s", strings.Join(got, " "), want)
	}
	if vars[1].State != 0x3C || vars[2].State != 0x3C {
		t.Errorf("replaced settings in state %#x, %#x, want 0x3c", vars[1].State, vars[2].State)
	}
}

// TestVariableLimit: the 2 MiB build takes authenticated variables of at
// most 0x2800 bytes; the 4 MiB one 0x8400.
func TestVariableLimit(t *testing.T) {
	k := testKeys(t)
	list := len(signatureList(guidCertX509, testOwner, k.DB[0]))
	withDB := func(n int) Keys {
		k2 := k
		k2.DB = nil
		for range n {
			k2.DB = append(k2.DB, k.DB[0])
		}
		return k2
	}
	over := 0x2800/list + 1                      // db's record: more than 0x2800 bytes
	under := (0x2800 - varHeaderSize - 6) / list // db's record: at most 0x2800 bytes
	small := newStore(0x20000, 0xe000-0x48)
	if _, err := Enroll(small, withDB(over)); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "variable db") {
		t.Fatalf("%d certificates into db in the 2 MiB layout: %v", over, err)
	}
	if _, err := Enroll(small, withDB(under)); err != nil {
		t.Fatalf("%d certificates into db in the 2 MiB layout: %v", under, err)
	}
	if _, err := Enroll(newStore(testFVLen, testStoreSize), withDB(over)); err != nil {
		t.Fatalf("%d certificates into db in the 4 MiB layout: %v", over, err)
	}
}

// TestListGarbled: a store's variable records are hostile; a record that
// runs past the store or is malformed is ErrCorrupt, never a panic.
func TestListGarbled(t *testing.T) {
	le := binary.LittleEndian
	base := newStore(0x3000, 0x1000)
	first := testVarsStart
	rec := func(f func(h []byte)) []byte {
		b := bytes.Clone(base)
		addRecord(t, b, "db", guidImageSecurityDB, attrKeys, StateAdded, []byte{1, 2, 3, 4, 5})
		f(b[first:])
		return b
	}
	end := 0x48 + 0x1000
	for _, c := range []struct {
		name  string
		store []byte
		msg   string
	}{
		{"name size huge", rec(func(h []byte) { le.PutUint32(h[36:], 0xFFFFFFFF) }), "run past"},
		{"data size huge", rec(func(h []byte) { le.PutUint32(h[40:], 0xFFFFFFFF) }), "run past"},
		{"both sizes huge", rec(func(h []byte) { le.PutUint32(h[36:], 0x80000000); le.PutUint32(h[40:], 0x80000000) }), "run past"},
		{"data one past the end", rec(func(h []byte) { le.PutUint32(h[40:], uint32(end-first-varHeaderSize-6+1)) }), "run past"},
		{"zero name", rec(func(h []byte) { le.PutUint32(h[36:], 0) }), "name of 0 bytes"},
		{"odd name", rec(func(h []byte) { le.PutUint32(h[36:], 5) }), "name of 5 bytes"},
		{"name without NUL", rec(func(h []byte) { le.PutUint32(h[36:], 4) }), "NUL terminator"},
		{"NUL inside the name", rec(func(h []byte) { h[varHeaderSize+2] = 0 }), "NUL inside"},
		{"header cut by the end", rec(func(h []byte) {
			// The next record starts 56 bytes before the end.
			le.PutUint32(h[40:], uint32(end-56-first-varHeaderSize-6))
			le.PutUint16(h[end-56-first:], startID)
		}), "header at"},
		{"free space not erased", rec(func(h []byte) { h[0x100] = 0 }), "not erased"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := List(c.store)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want ErrCorrupt and %q", err, c.msg)
			}
			if _, err := Enroll(c.store, testKeys(t)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Enroll: err = %v, want ErrCorrupt", err)
			}
		})
	}
	// A record whose data ends exactly at the end of the store is fine.
	exact := rec(func(h []byte) { le.PutUint32(h[40:], uint32(end-first-varHeaderSize-6)) })
	vars, err := List(exact)
	if err != nil || len(vars) != 1 || vars[0].Offset+vars[0].Size != end {
		t.Fatalf("a record up to the end of the store: %v, %+v", err, vars)
	}
}

// TestMutations garbles an enrolled store at random (a fixed seed): List
// and Enroll may refuse, but must not panic, and what List returns stays
// inside the store.
func TestMutations(t *testing.T) {
	k := testKeys(t)
	seed, err := Enroll(newStore(0x8000, 0x4000), k)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := List(seed)
	if err != nil {
		t.Fatal(err)
	}
	r := mrand.New(mrand.NewPCG(1, 2))
	n := 2000
	if testing.Short() {
		n = 300
	}
	for i := 0; i < n; i++ {
		b := bytes.Clone(seed)
		switch i % 4 {
		case 0: // a random byte of a record header
			v := vars[r.IntN(len(vars))]
			b[v.Offset+r.IntN(varHeaderSize)] = byte(r.Uint32())
		case 1: // a random size field
			v := vars[r.IntN(len(vars))]
			binary.LittleEndian.PutUint32(b[v.Offset+36+4*r.IntN(2):], r.Uint32())
		case 2: // cut anywhere
			b = b[:r.IntN(len(b))]
		case 3: // a few random bytes in the headers and first records
			for j := 0; j < 4; j++ {
				b[r.IntN(0x400)] = byte(r.Uint32())
			}
		}
		checkList(t, b)
		_, _ = Enroll(b, k)
	}
}

// checkList lists b and checks what it returns is inside b.
func checkList(t *testing.T, b []byte) {
	t.Helper()
	vars, err := List(b)
	if err != nil {
		return
	}
	for _, v := range vars {
		if v.Offset < 0 || v.Size < varHeaderSize || v.Offset+v.Size > len(b) || len(v.Data) > v.Size {
			t.Fatalf("record out of bounds: offset %#x size %d in %d bytes", v.Offset, v.Size, len(b))
		}
	}
}

// FuzzList: go test -fuzz FuzzList ./internal/efivars/ explores more.
func FuzzList(f *testing.F) {
	f.Add(newStore(0x3000, 0x1000))
	b := newStore(0x3000, 0x1000)
	addRecord(f, b, "db", guidImageSecurityDB, attrKeys, StateAdded, []byte{1, 2, 3})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		checkList(t, b)
	})
}
