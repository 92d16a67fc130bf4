package manifests_test

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// scalarLine is a "key": value line of a canonical encoding whose value
// is not an object or an array.
var scalarLine = regexp.MustCompile(`^(\s*"[^"]+": )([^{\[].*?)(,?)$`)

// oddValues replace each scalar in turn: values of every JSON kind,
// numbers at and past the edges of Go's integers, strings that are not
// valid UTF-8 or hold lone surrogates, times in other layouts.
var oddValues = []string{
	`null`, `true`, `0`, `-0`, `-1`, `1.0`, `1e2`, `0.5`, `18446744073709551615`, `18446744073709551616`,
	`9223372036854775808`, `-9223372036854775809`, `""`, `"x"`, "\"\xff\xfe\"", `"\ud800"`, `"\udc00\ud800"`,
	`"\u0000"`, `"0644"`, `"0o644"`, `"2026-01-01T00:00:00Z"`, `"2026-01-01T00:00:00+01:00"`,
	`"2026-01-01 00:00:00"`, `"2026-01-01T00:00:00.123456789Z"`, `[]`, `{}`, `[1]`, `{"a":1}`,
}

// Decode, which decodes with json/v2 what its names walk lets through,
// accepts exactly what it accepted when encoding/json decoded it
// (DecodeLegacy), into the same values, and refuses the rest in the same
// words: every scalar of every kind of manifest replaced by a value of
// every JSON kind, and values at the edges of what Go's types hold.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	docs := map[string]func() any{
		"overlay":  func() any { return validOverlay() },
		"rotation": func() any { return validRotation(t) },
		"index":    func() any { return validIndex() },
		"image":    func() any { return validImage() },
		"staged":   func() any { return validStaged() },
		"ledger": func() any {
			return &manifests.Ledger{Entries: []manifests.LedgerEntry{{Seq: 1, Action: manifests.LedgerApply, Version: "1.0.1", Digest: "sha256:" + strings.Repeat("a", 64)}}}
		},
	}
	checked := 0
	for name, mk := range docs {
		v := mk()
		raw, err := manifests.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(v).Elem()
		lines := strings.Split(string(raw), "\n")
		variants := []string{string(raw)}
		for i, l := range lines {
			m := scalarLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			for _, odd := range oddValues {
				mut := append([]string(nil), lines...)
				mut[i] = m[1] + odd + m[3]
				variants = append(variants, strings.Join(mut, "\n"))
			}
		}
		for _, d := range variants {
			got, want := reflect.New(typ), reflect.New(typ)
			err := manifests.Decode([]byte(d), got.Interface())
			werr := manifests.DecodeLegacy([]byte(d), want.Interface())
			checked++
			switch {
			case (err == nil) != (werr == nil):
				t.Errorf("%s: %.200q: Decode %v, encoding/json %v", name, d, err, werr)
			case err != nil && err.Error() != werr.Error():
				t.Errorf("%s: %.200q: Decode says %q, encoding/json %q", name, d, err, werr)
			case err == nil && !reflect.DeepEqual(got.Interface(), want.Interface()):
				t.Errorf("%s: %.200q: decoded %+v, encoding/json %+v", name, d, got.Interface(), want.Interface())
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d documents checked: the mutations found too few values", checked)
	}
}

// FuzzDecodeAgreesWithEncodingJSON holds Decode to DecodeLegacy on
// arbitrary bytes, as an overlay manifest and as an index.
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for _, v := range []any{validOverlay(), validIndex()} {
		raw, err := manifests.Encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte("{\"schema\":1,\"line\":\"\xff\",\"entries\":null}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range []reflect.Type{reflect.TypeFor[manifests.OverlayManifest](), reflect.TypeFor[manifests.Index]()} {
			got, want := reflect.New(typ), reflect.New(typ)
			err := manifests.Decode(b, got.Interface())
			werr := manifests.DecodeLegacy(b, want.Interface())
			if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("%s: Decode %v, encoding/json %v", typ, err, werr)
			}
			if err == nil && !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Fatalf("%s: decoded %+v, encoding/json %+v", typ, got.Interface(), want.Interface())
			}
		}
	})
}
