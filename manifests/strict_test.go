package manifests_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// Names encoding/json would take silently, and other JSON readers would
// read differently, are refused everywhere strata decodes: a name twice
// (the last would win) and a name matching a field only when case is
// ignored (encoding/json folds case, so "ENTRIES" would fill Entries).
func TestDecodeRefusesAmbiguousNames(t *testing.T) {
	entry := `{"path":"etc/a","type":"file","mode":"0644","uid":0,"gid":0,"size":1,"sha256":"` + strings.Repeat("0", 64) + `"}`
	setuid := strings.Replace(entry, `"mode":"0644"`, `"mode":"4755"`, 1)
	for name, doc := range map[string]string{
		"duplicate name":             `{"version":"1.0.1","version":"9.9.9"}`,
		"case variant beside":        `{"entries":[` + entry + `],"ENTRIES":[` + setuid + `]}`,
		"case variant alone":         `{"Version":"1.0.1"}`,
		"kelvin sign":                `{"\u212aind":"overlay"}`,
		"long s":                     `{"\u017fchema":1}`,
		"nested duplicate":           `{"entries":[` + strings.Replace(entry, `"mode":"0644"`, `"mode":420,"mode":"4755"`, 1) + `]}`,
		"nested case variant":        `{"entries":[` + strings.Replace(entry, `"mode":"0644"`, `"MODE":"4755"`, 1) + `]}`,
		"catalog unit duplicate":     `{"catalog":{"services":[{"unit":"a.service","unit":"b.service"}]}}`,
		"duplicate in a deep object": `{"parent":{"version":"1.0.0","digest":"x","digest":"y"}}`,
	} {
		var m manifests.OverlayManifest
		err := manifests.Decode([]byte(doc), &m)
		if !errors.Is(err, manifests.ErrInvalid) || !errors.Is(err, manifests.ErrRejected) {
			t.Errorf("%s: Decode = %v, want ErrInvalid", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "twice") && !strings.Contains(err.Error(), "case") && !strings.Contains(err.Error(), "spelled") {
			t.Errorf("%s: %v does not say what is ambiguous", name, err)
		}
	}
	// The same names spelled once and exactly decode; a syntax error is
	// reported as one, not as a naming problem.
	var m manifests.OverlayManifest
	if err := manifests.Decode([]byte(`{"version":"1.0.1","entries":[`+entry+`]}`), &m); err != nil || m.Version != "1.0.1" || len(m.Entries) != 1 {
		t.Fatalf("a plain document: %+v, %v", m, err)
	}
	if err := manifests.Decode([]byte(`{"version":`), &m); err == nil || strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("truncated document: %v, want a syntax error", err)
	}
	// Maps keep exact names: keys differing in case are distinct keys,
	// a key twice is refused.
	var mm map[string]string
	if err := manifests.Decode([]byte(`{"a":"1","A":"2"}`), &mm); err != nil || len(mm) != 2 {
		t.Fatalf("map with keys differing in case: %v, %v", mm, err)
	}
	if err := manifests.Decode([]byte(`{"a":"1","a":"2"}`), &mm); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("map with a key twice: %v, want ErrInvalid", err)
	}
}

// A document nested far deeper than encoding/json allows is refused as
// a syntax error, without the name check recursing as deep.
func TestDecodeDeepNesting(t *testing.T) {
	doc := strings.Repeat("[", 5_000_000) + strings.Repeat("]", 5_000_000)
	var v any
	if err := manifests.Decode([]byte(doc), &v); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("deeply nested document: %v, want ErrInvalid", err)
	}
	obj := strings.Repeat(`{"a":`, 2_000_000) + "1" + strings.Repeat("}", 2_000_000)
	var m map[string]any
	if err := manifests.Decode([]byte(obj), &m); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("deeply nested objects: %v, want ErrInvalid", err)
	}
}

// strictly is what Decode refused before it found unknown fields itself:
// encoding/json's decoder with DisallowUnknownFields, one value, no
// trailing data.
func strictly(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// Decode accepts exactly the documents the strict decoder accepts (names
// aside, which only Decode checks), and decodes them to the same values:
// unknown fields at every depth, in maps of structs, next to embedded
// fields, trailing data and broken syntax, from every cut of a valid
// overlay manifest and a rotation.
func TestDecodeAgreesWithStrictDecoder(t *testing.T) {
	docs := []string{
		`{"schema":1,"extra":1}`,
		`{"schema":1,"entries":[{"path":"a","type":"file","x":2}]}`,
		`{"schema":1,"catalog":{"services":[{"unit":"a.service","validate":{"argv":["x"]},"y":1}]}}`,
		`{"schema":1,"requires":{"image":">=1.0.0","z":[1,{"a":{}}]}}`,
		`{"schema":1,"parent":{"version":"1.0.0","digest":"d","q":null}}`,
		`{"schema":1} `, `{"schema":1} {}`, `{"schema":1}]`, `{"schema":1`, `{"schema":tru}`, `{"schema":1,}`,
		`{"schema":"\u0031"}`, `{"sch\u0065ma":1}`, `{"sch\u0065mx":1}`, `null`, `[]`, `{}`, ``, `"x"`,
	}
	for _, m := range []*manifests.OverlayManifest{validOverlay(), validRotation(t)} {
		raw, err := manifests.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(raw); i += 7 {
			docs = append(docs, string(raw[:i]))
		}
		// A field added inside each object of the document.
		s := string(raw)
		for i := 0; i < len(s); i++ {
			if s[i] == '{' {
				docs = append(docs, s[:i+1]+`"unknown_here":true,`+s[i+1:])
			}
		}
		docs = append(docs, s)
	}
	for _, d := range docs {
		var got, want manifests.OverlayManifest
		err := manifests.Decode([]byte(d), &got)
		werr := strictly([]byte(d), &want)
		if (err == nil) != (werr == nil) {
			t.Errorf("%.120q: Decode %v, the strict decoder %v", d, err, werr)
			continue
		}
		if err != nil && !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%.120q: %v, want ErrInvalid", d, err)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%.120q: decoded %+v, the strict decoder %+v", d, got, want)
		}
	}
	var m manifests.OverlayManifest
	err := manifests.Decode([]byte(`{"schema":1,"catalog":{"services":[{"unit":"a.service","y":1}]}}`), &m)
	if err == nil || !strings.Contains(err.Error(), `unknown field "y" in $.catalog.services[0]`) {
		t.Errorf("a nested unknown field: %v, want it named with its path", err)
	}
}

type embeddedA struct {
	Shared string // JSON name "Shared": a tag repeated in B would upset go vet
	OnlyA  string `json:"only_a"`
}
type embeddedB struct {
	Shared string
	Own    string `json:"own"`
}
type embedding struct {
	embeddedA
	embeddedB
	Own string `json:"own"`
}

// Promoted fields follow encoding/json: a field of the type's own hides
// an embedded one, and a name two embedded structs share decodes into
// neither, so Decode refuses it as unknown, as the strict decoder does.
func TestDecodeEmbeddedFields(t *testing.T) {
	for doc, ok := range map[string]bool{
		`{"only_a":"a","own":"o"}`: true,
		`{"Shared":"s"}`:           false,
		`{"nope":1}`:               false,
	} {
		var got, want embedding
		err := manifests.Decode([]byte(doc), &got)
		werr := strictly([]byte(doc), &want)
		if (err == nil) != ok || (werr == nil) != ok || got != want {
			t.Errorf("%s: Decode %v (%+v), strict decoder %v (%+v), want ok=%v", doc, err, got, werr, want, ok)
		}
	}
}
