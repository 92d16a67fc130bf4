package efivars

import (
	"bytes"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/testenv"
)

// Debian's ovmf package: the empty template, the store its build made by
// running edk2's EnrollDefaultKeys in a VM with the snakeoil certificate,
// and that certificate.
const (
	ovmfVars     = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	ovmfSnakeoil = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	ovmfMS       = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
	snakeoilPEM  = "/usr/share/ovmf/PkKek-1-snakeoil.pem"
)

// snakeoilOwner is EnrollDefaultKeys' own GUID (gEfiCallerIdGuid there),
// the owner of every entry it enrolls.
var snakeoilOwner = mustGUID("a0baa8a3-041d-48a8-bc87-c36d121b5e3d")

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// live returns the live records of vars by name and vendor, failing on
// two live copies of one variable.
func live(t *testing.T, vars []Variable) map[varID]Variable {
	t.Helper()
	m := map[varID]Variable{}
	for _, v := range vars {
		if !v.Live() {
			continue
		}
		id := varID{v.Name, v.Vendor}
		if _, dup := m[id]; dup {
			t.Fatalf("two live %s records", v.Name)
		}
		m[id] = v
	}
	return m
}

// TestSnakeoil enrolls the snakeoil certificate into the empty template
// and compares the result with the snakeoil store Debian's build made
// with the firmware itself.
func TestSnakeoil(t *testing.T) {
	testenv.RequireTools(t, []string{ovmfVars, ovmfSnakeoil, ovmfMS, snakeoilPEM})
	tmpl := readFile(t, ovmfVars)
	snake := readFile(t, ovmfSnakeoil)
	blk, _ := pem.Decode(readFile(t, snakeoilPEM))
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no certificate", snakeoilPEM)
	}
	cert := blk.Bytes

	if vars, err := List(tmpl); err != nil || len(vars) != 0 {
		t.Fatalf("%s: %d variables, %v; want an empty store", ovmfVars, len(vars), err)
	}
	snakeVars, err := List(snake)
	if err != nil {
		t.Fatal(err)
	}
	want := live(t, snakeVars)
	pk, ok := want[varID{"PK", guidGlobal}]
	if !ok {
		t.Fatalf("%s has no PK", ovmfSnakeoil)
	}
	// EnrollDefaultKeys gives its own GUID as the owner of every entry
	// but the PK's, which it gives EFI_GLOBAL_VARIABLE; Keys has one
	// Owner (the owner is informational: tools use it to tell entries
	// apart, the firmware ignores it). So that the comparisons below
	// hold, the copy of the snakeoil store is changed to have that owner
	// in its PK, after checking the PK's owner is what is expected.
	pkOwner := pk.Offset + varHeaderSize + 6 + sigListHeader
	if owner := GUID(snake[pkOwner : pkOwner+16]); owner != guidGlobal {
		t.Fatalf("the snakeoil PK's owner is %s, not %s", owner, guidGlobal)
	}
	copy(snake[pkOwner:], snakeoilOwner[:])
	if snakeVars, err = List(snake); err != nil {
		t.Fatal(err)
	}
	want = live(t, snakeVars)
	for _, id := range []varID{{"KEK", guidGlobal}, {"db", guidImageSecurityDB}, {"dbx", guidImageSecurityDB}} {
		if owner := GUID(want[id].Data[sigListHeader : sigListHeader+16]); owner != snakeoilOwner {
			t.Fatalf("the snakeoil %s's owner is %s, not %s", id.name, owner, snakeoilOwner)
		}
	}

	// The variables Enroll writes, and the snakeoil store's others: what
	// the firmware wrote while EnrollDefaultKeys ran, which it recreates
	// at the next boot. A variable the store gains in a new ovmf
	// package fails the test until it is judged.
	written := []varID{
		{"db", guidImageSecurityDB}, {"dbx", guidImageSecurityDB}, {"KEK", guidGlobal}, {"PK", guidGlobal},
		{"SecureBootEnable", guidSecureBootEnable}, {"CustomMode", guidCustomMode},
	}
	firmwareMade := map[string]bool{
		"certdb": true, "VendorKeysNv": true, "MTC": true, "Attempt 1": true, "Attempt 2": true,
		"Attempt 3": true, "Attempt 4": true, "Attempt 5": true, "Attempt 6": true, "Attempt 7": true,
		"Attempt 8": true, "InitialAttemptOrder": true, "Boot0000": true, "Boot0001": true, "Boot0002": true,
		"BootOrder": true, "Timeout": true, "PlatformLang": true, "Lang": true, "VarErrorFlag": true,
		"ConIn": true, "ConOut": true, "ErrOut": true, "Key0000": true, "Key0001": true,
		"MemoryTypeInformation": true,
	}
	for id, v := range want {
		isWritten := false
		for _, w := range written {
			isWritten = isWritten || w == id
		}
		if !isWritten && !firmwareMade[id.name] {
			t.Errorf("%s has %s (%s, attributes %#x, %d bytes), which Enroll neither writes nor knows the firmware makes", ovmfSnakeoil, id.name, id.vendor, v.Attributes, len(v.Data))
		}
	}

	keys := Keys{PK: cert, KEK: [][]byte{cert}, DB: [][]byte{cert}, Owner: snakeoilOwner}
	out, err := Enroll(tmpl, keys)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := List(out)
	if err != nil {
		t.Fatal(err)
	}
	got := live(t, vars)
	if len(vars) != len(written) || len(got) != len(written) {
		t.Fatalf("%d records, %d live, want %d", len(vars), len(got), len(written))
	}
	for _, id := range written {
		g, w := got[id], want[id]
		if g.Name != w.Name || g.Vendor != w.Vendor || g.Attributes != w.Attributes || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("%s: %s attributes %#x %d bytes; the snakeoil store's: %s attributes %#x %d bytes",
				id.name, g.Vendor, g.Attributes, len(g.Data), w.Vendor, w.Attributes, len(w.Data))
		}
	}
	// Outside the records, the template unchanged.
	last := vars[len(vars)-1]
	if !bytes.Equal(out[:vars[0].Offset], tmpl[:vars[0].Offset]) || !bytes.Equal(out[last.Offset+last.Size:], tmpl[last.Offset+last.Size:]) {
		t.Error("bytes outside the new records changed")
	}

	// With the snakeoil store's timestamp, every record is byte for byte
	// the firmware's, header included.
	ts := snake[pk.Offset+16 : pk.Offset+32]
	if !bytes.Equal(ts[7:], make([]byte, 9)) {
		t.Fatalf("the snakeoil PK's timestamp % x has more than a date and time", ts)
	}
	keys.Time = time.Date(int(binary.LittleEndian.Uint16(ts)), time.Month(ts[2]), int(ts[3]), int(ts[4]), int(ts[5]), int(ts[6]), 0, time.UTC)
	t.Logf("the snakeoil store's timestamp: %s", keys.Time.Format(time.RFC3339))
	out, err = Enroll(tmpl, keys)
	if err != nil {
		t.Fatal(err)
	}
	if vars, err = List(out); err != nil {
		t.Fatal(err)
	}
	got = live(t, vars)
	for _, id := range written {
		g, w := got[id], want[id]
		if !bytes.Equal(out[g.Offset:g.Offset+g.Size], snake[w.Offset:w.Offset+w.Size]) {
			t.Errorf("%s: the record differs from the snakeoil store's:\n% x\n% x", id.name, out[g.Offset:g.Offset+varHeaderSize], snake[w.Offset:w.Offset+varHeaderSize])
		}
	}

	// Stores with keys are refused, naming the first one found.
	for _, c := range []struct{ file, name string }{{ovmfSnakeoil, "db"}, {ovmfMS, ""}} {
		_, err := Enroll(readFile(t, c.file), keys)
		if !errors.Is(err, ErrEnrolled) || !strings.Contains(err.Error(), "already has a "+c.name) {
			t.Errorf("%s: err = %v, want ErrEnrolled naming %q", c.file, err, c.name)
		}
	}
}
