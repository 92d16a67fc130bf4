package nodestate_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// signedLine stores, on node n, the signed manifests of overlays 1.0.1
// (signed by a, with a layer image), 1.0.2 (signed by a, rotating a out
// for b) and 1.0.3 (signed by b, with a layer image), and returns their
// ledger records.
func signedLine(t *testing.T, n nodestate.Node, a, b *sign.Key) []manifests.LedgerEntry {
	t.Helper()
	layer := func(c string) *manifests.LayerImage {
		return &manifests.LayerImage{Format: "erofs", SHA256: strings.Repeat(c, 64), Size: 8192, DataBlocks: 1, Salt: strings.Repeat("0", 64), RootHash: strings.Repeat(c, 64)}
	}
	overlays := []struct {
		m   manifests.OverlayManifest
		key *sign.Key
	}{
		{manifests.OverlayManifest{Line: "x", Version: "1.0.1", Layer: layer("1")}, a},
		{manifests.OverlayManifest{Line: "x", Version: "1.0.2", Keys: &manifests.Rotation{Add: []string{b.PublicString()}, Revoke: []string{a.ID()}}}, a},
		{manifests.OverlayManifest{Line: "x", Version: "1.0.3", Layer: layer("3")}, b},
	}
	var out []manifests.LedgerEntry
	for _, o := range overlays {
		raw, err := manifests.Encode(o.m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(n.ManifestStore(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := n.StoreManifest(o.m.Version, raw, o.key.Sign(raw, sign.OverlayComment("x", o.m.Version))); err != nil {
			t.Fatal(err)
		}
		out = append(out, manifests.LedgerEntry{Action: manifests.LedgerApply, Line: "x", Version: o.m.Version, Digest: manifests.Digest(raw), Layer: o.m.Layer})
	}
	return out
}

func TestSignedRecords(t *testing.T) {
	a, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	trustA, err := a.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t)
	good := signedLine(t, n, a, b)
	// The rotation in 1.0.2 is followed: 1.0.3 verifies with b.
	if at, unsigned, err := n.SignedRecords(trustA, good); at != -1 || err != nil || len(unsigned) != 0 {
		t.Fatalf("genuine records: %d %v %v", at, unsigned, err)
	}
	// b alone (an image built after the rotation) does not verify 1.0.1.
	trustB, err := b.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	if at, _, err := n.SignedRecords(trustB, good); at != 0 || !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("records with the rotated key only: %d %v", at, err)
	}

	edited := func(i int, edit func(*manifests.LedgerEntry)) []manifests.LedgerEntry {
		out := append([]manifests.LedgerEntry(nil), good...)
		edit(&out[i])
		return out
	}
	cases := []struct {
		name    string
		records []manifests.LedgerEntry
		at      int
		want    error
		says    string
	}{
		{"layer record changed", edited(2, func(e *manifests.LedgerEntry) { l := *e.Layer; l.RootHash = strings.Repeat("f", 64); e.Layer = &l }), 2, nodestate.ErrDrift, "its signed manifest sha256 333"},
		{"digest changed", edited(0, func(e *manifests.LedgerEntry) { e.Digest = manifests.Digest([]byte("other")) }), 0, nodestate.ErrDrift, "the ledger records"},
		{"another line", edited(1, func(e *manifests.LedgerEntry) { e.Line = "y" }), 1, sign.ErrBadSignature, "strata overlay y-1.0.2"},
		{"no stored manifest", edited(2, func(e *manifests.LedgerEntry) { e.Version = "1.0.4" }), 2, os.ErrNotExist, "1.0.4.json.minisig"},
	}
	for _, c := range cases {
		at, _, err := n.SignedRecords(trustA, c.records)
		if at != c.at || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %d %v; want %d, %v saying %q", c.name, at, err, c.at, c.want, c.says)
		}
	}

	// A manifest re-signed by a key the image does not trust, with the
	// record's digest made to match.
	raw := []byte(`{"line":"x","version":"1.0.3"}`)
	other, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.StoreManifest("1.0.3", raw, other.Sign(raw, sign.OverlayComment("x", "1.0.3"))); err != nil {
		t.Fatal(err)
	}
	forged := edited(2, func(e *manifests.LedgerEntry) { e.Digest = manifests.Digest(raw) })
	if at, _, err := n.SignedRecords(trustA, forged); at != 2 || !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("a manifest signed by an untrusted key: %d %v", at, err)
	}
	// Signed by b, but naming no layer image: accepted, and reported.
	if err := n.StoreManifest("1.0.3", raw, b.Sign(raw, sign.OverlayComment("x", "1.0.3"))); err != nil {
		t.Fatal(err)
	}
	at, unsigned, err := n.SignedRecords(trustA, forged)
	if at != -1 || err != nil || len(unsigned) != 1 || unsigned[0].Version != "1.0.3" {
		t.Fatalf("a signed manifest without a layer record: %d %v %v", at, unsigned, err)
	}
}
