package uki

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/testenv"
)

// TestSigners reads the signer's certificate of a UKI sbsign signed: the
// db certificate it was signed with, not another; an unsigned UKI has
// none, and a certificate table that overruns the file is refused.
func TestSigners(t *testing.T) {
	testenv.RequireTools(t, []string{"sbsign"})
	dir := t.TempDir()
	img := build(t, defaultStub().bytes(), testParts("root=/dev/mapper/strata-root"))
	if _, err := Signers(bytes.NewReader(img), int64(len(img))); !errors.Is(err, ErrNoSignature) {
		t.Fatalf("an unsigned UKI: %v, want ErrNoSignature", err)
	}
	unsigned := filepath.Join(dir, "u.efi")
	if err := os.WriteFile(unsigned, img, 0o644); err != nil {
		t.Fatal(err)
	}
	sign := func(name string) []byte {
		t.Helper()
		key, cert := testenv.SecureBootKey(t, dir, name)
		out := filepath.Join(dir, name+".efi")
		if b, err := exec.Command("sbsign", "--key", key, "--cert", cert, "--output", out, unsigned).CombinedOutput(); err != nil {
			t.Fatalf("sbsign: %v\n%s", err, b)
		}
		signed, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	signed := sign("db")
	dbCert, err := secureboot.ReadCertificate(filepath.Join(dir, "db.crt"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Signers(bytes.NewReader(signed), int64(len(signed)))
	if err != nil || len(got) != 1 || !got[0].Equal(dbCert) {
		t.Fatalf("Signers = %v, %v; want the db certificate", got, err)
	}
	other := sign("other")
	if got, err := Signers(bytes.NewReader(other), int64(len(other))); err != nil || len(got) != 1 || got[0].Equal(dbCert) {
		t.Fatalf("Signers of another key's image = %v, %v", got, err)
	}

	// A certificate entry longer than its table.
	bad := bytes.Clone(signed)
	off := certTableOffset(t, bad)
	binary.LittleEndian.PutUint32(bad[off:], 1<<20)
	if _, err := Signers(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrNotUKI) {
		t.Errorf("an overlong certificate entry: %v, want ErrNotUKI", err)
	}
	// Garbage where the signature is.
	bad = bytes.Clone(signed)
	for i := off + 8; i < off+64; i++ {
		bad[i] = 0xff
	}
	if _, err := Signers(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrNotUKI) {
		t.Errorf("a garbled signature: %v, want ErrNotUKI", err)
	}
}

// certTableOffset is where a signed PE's certificate table starts.
func certTableOffset(t *testing.T, img []byte) int {
	t.Helper()
	peOff := binary.LittleEndian.Uint32(img[0x3c:])
	// PE signature (4), COFF header (20), then the optional header: the
	// data directories start 112 bytes into a PE32+ one; entry 4 is the
	// security directory.
	dd := int(peOff) + 4 + 20 + 112 + dirSecurity*8
	return int(binary.LittleEndian.Uint32(img[dd:]))
}
