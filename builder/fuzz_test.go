package builder_test

import (
	"errors"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/manifests"
)

// FuzzParseRecipe feeds arbitrary YAML to ParseRecipe: it must not panic,
// must refuse with ErrRecipe, and a recipe it accepts must name a valid
// line, version and tree paths.
func FuzzParseRecipe(f *testing.F) {
	f.Add([]byte(goodRecipe))
	f.Add([]byte("line: demo\nversion: 1.0.0\n"))
	f.Add([]byte("line: demo\nversion: 1.0.0\nfiles:\n  - path: /a/b/l\n    symlink: ../../x\n"))
	f.Add([]byte("line: demo\nversion: 1.0.0\nfiles:\n  - path: /etc/x\n    content: ~\n    mode: \"7777\"\n    owner: \"0:0\"\n"))
	f.Add([]byte("line: demo\nversion: 1.0.0\nservices:\n  - unit: a.service\n    paths: [/etc/a]\n    reload: [/etc/b]\nremove: [/x]\n"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte("line: !!binary aGVsbG8=\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := builder.ParseRecipe(b)
		if err != nil {
			if !errors.Is(err, builder.ErrRecipe) {
				t.Fatalf("ParseRecipe error %v is not ErrRecipe", err)
			}
			return
		}
		if err := manifests.ValidLine(r.Line); err != nil {
			t.Fatalf("accepted recipe has line %q: %v", r.Line, err)
		}
		if _, err := manifests.ParseVersion(r.Version); err != nil {
			t.Fatalf("accepted recipe has version %q: %v", r.Version, err)
		}
		for _, f := range r.Files {
			if _, err := builder.TreePath(f.Path); err != nil {
				t.Fatalf("accepted recipe has file path %q: %v", f.Path, err)
			}
		}
		for _, p := range r.Remove {
			if _, err := builder.TreePath(p); err != nil {
				t.Fatalf("accepted recipe removes %q: %v", p, err)
			}
		}
	})
}
