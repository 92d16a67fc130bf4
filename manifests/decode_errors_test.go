package manifests_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// Decoding errors name keys and kinds of values, never Go's types.
func TestDecodeErrorsInDocumentWords(t *testing.T) {
	cases := map[string]string{
		`{"schema": "1"}`:              `decoding overlay manifest: "schema": a JSON string where a whole number is expected`,
		`{"services": {}}`:             `"services": a JSON object where a list is expected`,
		`{"requires": {"image": 3}}`:   `"requires.image": a JSON number where a string is expected`,
		`{"services": [{"unit": 3}]}`:  `"services.unit": a JSON number where a string is expected`,
		`{"entries": [{"type": 5}]}`:   `"entries.type": a JSON number where a string is expected`,
		`[1]`:                          `the document: a JSON array where a mapping (overlay manifest) is expected`,
		`{"schema": 1, "extra": true}`: `unknown field "extra"`,
		`{"schema": 1} x`:              `decoding overlay manifest: trailing data`,
	}
	for in, want := range cases {
		var m manifests.OverlayManifest
		err := manifests.Decode([]byte(in), &m)
		if !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "manifests.") || strings.Contains(err.Error(), "json:") || strings.Contains(err.Error(), "Go ") {
			t.Errorf("%s: %v; want %q", in, err, want)
		}
	}
	if k := manifests.ValueKind("[]manifests.Entry"); k != "a list" {
		t.Errorf("ValueKind = %q", k)
	}
}

// Unmarshal takes fields the type lacks (a document from another strata
// version) and words its errors as Decode does.
func TestUnmarshalLenientInDocumentWords(t *testing.T) {
	var r manifests.Ref
	if err := manifests.Unmarshal([]byte(`{"version": "1.0.0", "newer": true}`), &r); err != nil || r.Version != "1.0.0" {
		t.Fatalf("extra field: %+v %v", r, err)
	}
	err := manifests.Unmarshal([]byte(`{"version": 5}`), &r)
	if err == nil || !strings.Contains(err.Error(), `"version": a JSON number where a string is expected`) || strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "json:") {
		t.Errorf("wrong kind: %v", err)
	}
}

// A mode is an octal string; a number too large for its field is named
// as out of range, not as the wrong kind.
func TestDecodeErrorsModeAndRange(t *testing.T) {
	var e manifests.Entry
	if err := manifests.Unmarshal([]byte(`{"mode": 420}`), &e); err == nil || !strings.Contains(err.Error(), `"mode": a JSON number where a string is expected`) {
		t.Errorf("numeric mode: %v", err)
	}
	if err := manifests.Unmarshal([]byte(`{"size": 99999999999999999999999}`), &e); err == nil || !strings.Contains(err.Error(), `"size": the number 99999999999999999999999 is out of range`) {
		t.Errorf("huge size: %v", err)
	}
}
