package manifests_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

const hexB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func sampleEntries() []manifests.Entry {
	return []manifests.Entry{
		{Path: "etc", Type: manifests.TypeDir, Mode: 0755},
		{Path: "etc/link", Type: manifests.TypeSymlink, Mode: 0777, Target: "x"},
		{Path: "etc/x", Type: manifests.TypeFile, Mode: 0644, UID: 1, GID: 2, Size: 3, SHA256: hexA},
		{Path: "usr", Type: manifests.TypeDir, Mode: 0755},
	}
}

func TestTreeDigestOrderIndependent(t *testing.T) {
	es := sampleEntries()
	want := manifests.TreeDigest(es)
	if !manifests.ValidDigest(want) {
		t.Fatalf("TreeDigest = %q, not a digest", want)
	}
	reversed := make([]manifests.Entry, len(es))
	for i, e := range es {
		reversed[len(es)-1-i] = e
	}
	before := append([]manifests.Entry(nil), reversed...)
	if got := manifests.TreeDigest(reversed); got != want {
		t.Fatalf("reversed order digest %s, want %s", got, want)
	}
	if !reflect.DeepEqual(reversed, before) {
		t.Fatal("TreeDigest modified its input")
	}
	shuffled := []manifests.Entry{es[2], es[0], es[3], es[1]}
	if got := manifests.TreeDigest(shuffled); got != want {
		t.Fatalf("shuffled order digest %s, want %s", got, want)
	}
}

func TestTreeDigestEmpty(t *testing.T) {
	if got, want := manifests.TreeDigest(nil), manifests.Digest(nil); got != want {
		t.Fatalf("TreeDigest(nil) = %s, want digest of nothing %s", got, want)
	}
}

func TestTreeDigestSensitivity(t *testing.T) {
	base := manifests.TreeDigest(sampleEntries())
	mutations := map[string]func(es []manifests.Entry){
		"file mode":      func(es []manifests.Entry) { es[2].Mode = 0600 },
		"setuid bit":     func(es []manifests.Entry) { es[2].Mode = 04644 },
		"dir mode":       func(es []manifests.Entry) { es[0].Mode = 0750 },
		"uid":            func(es []manifests.Entry) { es[2].UID = 0 },
		"gid":            func(es []manifests.Entry) { es[2].GID = 0 },
		"content":        func(es []manifests.Entry) { es[2].SHA256 = hexB },
		"size":           func(es []manifests.Entry) { es[2].Size = 4 },
		"target":         func(es []manifests.Entry) { es[1].Target = "y" },
		"path":           func(es []manifests.Entry) { es[2].Path = "etc/y" },
		"type":           func(es []manifests.Entry) { es[3].Type = manifests.TypeFile },
		"dir owner":      func(es []manifests.Entry) { es[3].UID = 1000 },
		"uid/gid swap":   func(es []manifests.Entry) { es[2].UID, es[2].GID = 2, 1 },
		"symlink target": func(es []manifests.Entry) { es[1].Target = "/x" },
	}
	seen := map[string]string{base: "base"}
	for name, mutate := range mutations {
		es := sampleEntries()
		mutate(es)
		got := manifests.TreeDigest(es)
		if got == base {
			t.Errorf("changing %s does not change the tree digest", name)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("changing %s gives the same digest as %s", name, other)
		}
		seen[got] = name
	}
	// Removing or adding an entry changes the digest too.
	if manifests.TreeDigest(sampleEntries()[:3]) == base {
		t.Error("dropping an entry does not change the tree digest")
	}
}

func TestParseVersion(t *testing.T) {
	good := []string{"1.0.0", "0.0.1", "1.2.3-rc.1", "1.2.3+build.5", "1.0.0+head.1.1.0", "10.20.30"}
	for _, v := range good {
		if _, err := manifests.ParseVersion(v); err != nil {
			t.Errorf("ParseVersion(%q) = %v", v, err)
		}
	}
	bad := []string{"v1.0.0", "1.0", "1", "01.0.0", "1.01.0", "1.0.01", "", "1.0.0.0", " 1.0.0", "latest", "1.0.0-"}
	for _, v := range bad {
		if _, err := manifests.ParseVersion(v); !errors.Is(err, manifests.ErrVersion) {
			t.Errorf("ParseVersion(%q) = %v, want ErrVersion", v, err)
		}
	}
}

func TestCheckGreater(t *testing.T) {
	tests := []struct {
		v, parent string
		ok        bool
	}{
		{"1.0.1", "1.0.0", true},
		{"1.1.0", "1.0.9", true},
		{"2.0.0", "1.99.99", true},
		{"1.0.0", "1.0.0-rc.1", true},
		{"1.0.0-rc.2", "1.0.0-rc.1", true},
		{"1.10.0", "1.9.0", true},
		{"1.0.0", "1.0.0", false},
		{"1.0.0", "1.0.1", false},
		{"1.0.0-rc.1", "1.0.0", false},
		// Build metadata does not take part in precedence.
		{"1.0.0+b", "1.0.0+a", false},
		{"1.0.0+head.1.1.0", "1.0.0", false},
		{"v1.0.1", "1.0.0", false},
		{"1.0.1", "1.0", false},
	}
	for _, tt := range tests {
		err := manifests.CheckGreater(tt.v, tt.parent)
		if tt.ok && err != nil {
			t.Errorf("CheckGreater(%q, %q) = %v", tt.v, tt.parent, err)
		}
		if !tt.ok && !errors.Is(err, manifests.ErrVersion) {
			t.Errorf("CheckGreater(%q, %q) = %v, want ErrVersion", tt.v, tt.parent, err)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	if manifests.CompareVersions("1.10.0", "1.9.0") <= 0 {
		t.Error("1.10.0 should sort after 1.9.0")
	}
	if manifests.CompareVersions("1.0.0-rc.1", "1.0.0") >= 0 {
		t.Error("1.0.0-rc.1 should sort before 1.0.0")
	}
	if manifests.CompareVersions("1.0.0", "1.0.0") != 0 {
		t.Error("1.0.0 should equal itself")
	}
}

func TestSatisfies(t *testing.T) {
	tests := []struct {
		v, c string
		want bool
	}{
		{"1.0.0", "^1.0.0", true},
		{"1.4.2", "^1.0.0", true},
		{"2.0.0", "^1.0.0", false},
		{"1.0.0+head.1.1.0", "^1.0.0", true},
		{"1.0.0+build", "1.0.0", true},
		{"1.2.0+x", ">= 1.2, < 2", true},
		{"1.1.9+x", ">= 1.2, < 2", false},
		{"0.9.0", ">= 1.0.0", false},
	}
	for _, tt := range tests {
		got, err := manifests.Satisfies(tt.v, tt.c)
		if err != nil {
			t.Errorf("Satisfies(%q, %q) error %v", tt.v, tt.c, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Satisfies(%q, %q) = %v, want %v", tt.v, tt.c, got, tt.want)
		}
	}
	if _, err := manifests.Satisfies("v1.0.0", "^1.0.0"); !errors.Is(err, manifests.ErrVersion) {
		t.Errorf("Satisfies with non-strict version: %v, want ErrVersion", err)
	}
	if _, err := manifests.Satisfies("1.0.0", "^^nope"); !errors.Is(err, manifests.ErrVersion) {
		t.Errorf("Satisfies with bad constraint: %v, want ErrVersion", err)
	}
}

type encodeSample struct {
	B    string            `json:"b"`
	A    int               `json:"a"`
	M    map[string]string `json:"m"`
	HTML string            `json:"html"`
	Mode manifests.Mode    `json:"mode"`
}

func TestEncodeDeterministic(t *testing.T) {
	v := encodeSample{B: "x", A: 1, M: map[string]string{"z": "1", "a": "2", "m": "3"}, HTML: "<a&b>", Mode: 04755}
	first, err := manifests.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		again, err := manifests.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("Encode is not deterministic:\n%s\n%s", first, again)
		}
	}
	want := "{\n  \"b\": \"x\",\n  \"a\": 1,\n  \"m\": {\n    \"a\": \"2\",\n    \"m\": \"3\",\n    \"z\": \"1\"\n  },\n  \"html\": \"<a&b>\",\n  \"mode\": \"4755\"\n}\n"
	if string(first) != want {
		t.Fatalf("Encode =\n%s\nwant\n%s", first, want)
	}
	// Encode/Decode round trip gives back the same bytes.
	var back encodeSample
	if err := manifests.Decode(first, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := manifests.Encode(back)
	if !bytes.Equal(first, again) {
		t.Fatalf("round trip changed the encoding:\n%s\n%s", first, again)
	}
}

func TestDecodeStrict(t *testing.T) {
	var r manifests.Ref
	if err := manifests.Decode([]byte(`{"version":"1.0.0","digest":"d"}`), &r); err != nil || r.Version != "1.0.0" {
		t.Fatalf("Decode good document: %v (%+v)", err, r)
	}
	bad := map[string]string{
		"unknown field":     `{"version":"1.0.0","digest":"d","extra":1}`,
		"trailing document": `{"version":"1.0.0","digest":"d"}{}`,
		"trailing garbage":  `{"version":"1.0.0","digest":"d"} x`,
		"trailing bracket":  `{"version":"1.0.0","digest":"d"}]`,
		"wrong type":        `{"version":1}`,
		"empty":             ``,
		"truncated":         `{"version":"1.0.0"`,
	}
	for name, doc := range bad {
		var r manifests.Ref
		if err := manifests.Decode([]byte(doc), &r); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: Decode = %v, want ErrInvalid", name, err)
		}
	}
	// Trailing whitespace is not data.
	if err := manifests.Decode([]byte("{\"version\":\"1.0.0\",\"digest\":\"d\"}\n\n  "), &r); err != nil {
		t.Errorf("Decode with trailing whitespace: %v", err)
	}
}

func TestDecodeOversize(t *testing.T) {
	doc := `{"version":"` + strings.Repeat("1", manifests.MaxManifestSize) + `","digest":""}`
	var r manifests.Ref
	if err := manifests.Decode([]byte(doc), &r); !errors.Is(err, manifests.ErrTooLarge) {
		t.Fatalf("Decode of %d bytes = %v, want ErrTooLarge", len(doc), err)
	}
	// A document exactly at the limit is accepted.
	pad := manifests.MaxManifestSize - len(`{"version":"","digest":""}`)
	doc = `{"version":"` + strings.Repeat("1", pad) + `","digest":""}`
	if len(doc) != manifests.MaxManifestSize {
		t.Fatalf("test document is %d bytes", len(doc))
	}
	if err := manifests.Decode([]byte(doc), &r); err != nil {
		t.Fatalf("Decode at the limit: %v", err)
	}
}

func TestReadLimited(t *testing.T) {
	b, err := manifests.ReadLimited(strings.NewReader("12345"), 5)
	if err != nil || string(b) != "12345" {
		t.Fatalf("ReadLimited at limit = %q, %v", b, err)
	}
	if _, err := manifests.ReadLimited(strings.NewReader("123456"), 5); !errors.Is(err, manifests.ErrTooLarge) {
		t.Fatalf("ReadLimited over limit = %v, want ErrTooLarge", err)
	}
}

// The tree digest's bytes are those of its definition, written with fmt
// (the form every ledger and image manifest so far records): modes of
// fewer and more than four octal digits, owners, sizes, targets.
func TestTreeDigestFormat(t *testing.T) {
	es := []manifests.Entry{
		{Path: "a", Type: manifests.TypeDir, Mode: 0},
		{Path: "a/b", Type: manifests.TypeFile, Mode: 04755, UID: 65534, GID: 100, Size: 1 << 40, SHA256: hexA},
		{Path: "a/c", Type: manifests.TypeFile, Mode: 07, Size: 0, SHA256: hexB},
		{Path: "a/d", Type: manifests.TypeSymlink, Mode: 0777, Target: "../x y"},
		{Path: "a/e", Type: manifests.TypeFile, Mode: 0o107777, UID: 1 << 31, Size: 5, SHA256: hexA},
		{Path: "z\xff", Type: "special", Mode: 01000},
	}
	h := sha256.New()
	for _, e := range es {
		fmt.Fprintf(h, "%s\x00%s\x00%04o\x00%d\x00%d\x00%d\x00%s\x00%s\n",
			e.Path, e.Type, uint32(e.Mode), e.UID, e.GID, e.Size, e.SHA256, e.Target)
	}
	want := manifests.DigestPrefix + hex.EncodeToString(h.Sum(nil))
	if got := manifests.TreeDigest(es); got != want {
		t.Errorf("TreeDigest = %s, want %s", got, want)
	}
	slices.Reverse(es)
	if got := manifests.TreeDigest(es); got != want {
		t.Errorf("TreeDigest of the entries reversed = %s, want %s", got, want)
	}
}

// BenchmarkTreeDigest measures the tree digest of 4,000 entries, sorted
// (as tree.State.Entries gives them).
func BenchmarkTreeDigest(b *testing.B) {
	var es []manifests.Entry
	for i := range 4000 {
		es = append(es, manifests.Entry{Path: fmt.Sprintf("usr/share/bench/d%02d/f%05d", i%40, i), Type: manifests.TypeFile, Mode: 0644, Size: int64(i * 24), SHA256: hexA})
	}
	slices.SortFunc(es, func(a, b manifests.Entry) int { return strings.Compare(a.Path, b.Path) })
	b.ReportAllocs()
	for b.Loop() {
		manifests.TreeDigest(es)
	}
}
