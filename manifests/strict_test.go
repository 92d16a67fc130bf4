package manifests_test

import (
	"errors"
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
