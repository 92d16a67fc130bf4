package builder_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/manifests"
)

const goodRecipe = `line: demo
version: 1.0.0
epoch: 1700000000
compressor: xz
base:
  dir: rootfs
  preserve: true
files:
  - path: /etc/x
    content: "x\n"
    mode: "0600"
    owner: "1000:1000"
  - path: /etc/dir
    dir: true
  - path: /etc/link
    symlink: x
  - path: /etc/abs
    symlink: /usr/lib
  - path: /usr/bin/tool
    src: tool
  - path: /etc/only-mode
    mode: "0640"
remove:
  - /usr/share/doc
services:
  - unit: web.service
    paths: [/etc/web.conf]
    reload: [/etc/web.d]
keys:
  - extra.pub
`

func TestParseRecipeGood(t *testing.T) {
	r, err := builder.ParseRecipe([]byte(goodRecipe))
	if err != nil {
		t.Fatal(err)
	}
	if r.Line != "demo" || r.Version != "1.0.0" || r.Epoch != 1700000000 || r.Compressor != "xz" ||
		r.Base.Dir != "rootfs" || !r.Base.Preserve || len(r.Files) != 6 || len(r.Remove) != 1 ||
		len(r.Services) != 1 || len(r.Keys) != 1 {
		t.Fatalf("ParseRecipe = %+v", r)
	}
	if r.Files[0].Content == nil || *r.Files[0].Content != "x\n" || r.Files[0].Mode != "0600" || r.Files[0].Owner != "1000:1000" {
		t.Fatalf("files[0] = %+v", r.Files[0])
	}
	// An empty content is a file, not "nothing to do".
	if _, err := builder.ParseRecipe([]byte("line: a\nversion: 1.0.0\nfiles:\n  - path: /etc/empty\n    content: \"\"\n")); err != nil {
		t.Fatalf("empty content: %v", err)
	}
}

const layeredGood = `line: node
version: 1.0.0
base:
  debootstrap:
    suite: bookworm
    variant: minbase
    include: [systemd, nginx]
steps:
  - copy: {path: /etc/x, content: "x"}
  - run: apt-get install -y rsyslog
  - remove: /etc/x
strata: {}
`

func TestParseRecipeSteps(t *testing.T) {
	r, err := builder.ParseRecipe([]byte(layeredGood))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Base.Debootstrap
	if d == nil || d.Suite != "bookworm" || d.Variant != "minbase" || len(d.Include) != 2 || d.Mirror != "" {
		t.Fatalf("debootstrap = %+v", d)
	}
	if len(r.Steps) != 3 || r.Steps[0].Copy == nil || r.Steps[1].Run == "" || r.Steps[2].Remove != "/etc/x" {
		t.Fatalf("steps = %+v", r.Steps)
	}
	if r.Strata == nil || r.Strata.Binary != "" {
		t.Fatalf("strata = %+v", r.Strata)
	}
	for _, base := range []string{"tar: rootfs.tar.zst", "image: base.squashfs"} {
		if _, err := builder.ParseRecipe([]byte("line: a\nversion: 1.0.0\nbase:\n  " + base + "\n")); err != nil {
			t.Errorf("base %s: %v", base, err)
		}
	}
}

func TestParseRecipeErrors(t *testing.T) {
	head := "line: demo\nversion: 1.0.0\n"
	tests := []struct {
		name    string
		recipe  string
		mention string // the error names this
	}{
		{"unknown top-level key", head + "extra: 1\n", "extra"},
		{"misspelt key", head + "compresor: xz\n", "compresor"},
		{"unknown file key", head + "files:\n  - path: /etc/x\n    contnet: x\n", "contnet"},
		{"unknown base key", head + "base:\n  directory: x\n", "directory"},
		{"unknown service key", head + "services:\n  - unit: a.service\n    restart: [/etc/a]\n", "restart"},
		{"hierarchy /var", head + "hierarchies: [/etc, /var]\n", "/var"},
		{"hierarchy not top-level", head + "hierarchies: [/etc/nginx]\n", "hierarchies"},
		{"data in a managed hierarchy", head + "data: [/etc/app/db]\n", "managed hierarchy /etc"},
		{"data in a declared hierarchy", head + "hierarchies: [/etc, /srv]\ndata: [/srv/db]\n", "managed hierarchy /srv"},
		{"data below data", head + "data: [/srv/db, /srv]\n", "below /srv"},
		{"data relative", head + "data: [srv/db]\n", "data[0]"},
		{"data the state partition", head + "data: [/state/x]\n", "/state"},
		{"data over programs", head + "data: [/lib/app]\n", "programs and libraries"},
		{"hierarchy twice", head + "hierarchies: [/srv, /srv]\n", "twice"},
		{"relative validate program", head + "services:\n  - unit: a.service\n    validate: [nginx, -t]\n", "validate"},
		{"empty check", head + "services:\n  - unit: a.service\n    check: []\n", "check"},
		{"missing line", "version: 1.0.0\n", "line"},
		{"bad line name", "line: Demo\nversion: 1.0.0\n", "line"},
		{"line with slash", "line: a/b\nversion: 1.0.0\n", "line"},
		{"missing version", "line: demo\n", "version"},
		{"bad version 1.0", "line: demo\nversion: \"1.0\"\n", "version"},
		{"version with v", "line: demo\nversion: v1.0.0\n", "version"},
		{"version leading zero", "line: demo\nversion: 01.0.0\n", "version"},
		{"negative epoch", head + "epoch: -1\n", "epoch"},
		{"epoch not a number", head + "epoch: yesterday\n", "yesterday"},
		{"bad compressor", head + "compressor: bzip2\n", "bzip2"},
		{"bad mode 999", head + "files:\n  - path: /etc/x\n    content: x\n    mode: \"999\"\n", "999"},
		{"mode too large", head + "files:\n  - path: /etc/x\n    content: x\n    mode: \"17777\"\n", "17777"},
		{"mode symbolic", head + "files:\n  - path: /etc/x\n    content: x\n    mode: u+x\n", "u+x"},
		{"owner by name", head + "files:\n  - path: /etc/x\n    content: x\n    owner: root\n", "root"},
		{"owner user:group names", head + "files:\n  - path: /etc/x\n    content: x\n    owner: root:root\n", "root:root"},
		{"owner negative", head + "files:\n  - path: /etc/x\n    content: x\n    owner: \"-1:0\"\n", "-1:0"},
		{"owner uid only", head + "files:\n  - path: /etc/x\n    content: x\n    owner: \"0\"\n", "owner"},
		{"relative path", head + "files:\n  - path: etc/x\n    content: x\n", "etc/x"},
		{"dotdot path", head + "files:\n  - path: /etc/../x\n    content: x\n", "files[0].path"},
		{"trailing slash", head + "files:\n  - path: /etc/x/\n    content: x\n", "files[0].path"},
		{"root path", head + "files:\n  - path: /\n    dir: true\n", "files[0].path"},
		{"node state path", head + "files:\n  - path: /var/lib/strata/x\n    content: x\n", "var/lib/strata"},
		{"node state dir", head + "files:\n  - path: /var/lib/strata\n    dir: true\n", "var/lib/strata"},
		{"image manifest path", head + "files:\n  - path: /usr/lib/strata/image.json\n    content: x\n", "image.json"},
		{"src and content", head + "files:\n  - path: /etc/x\n    src: a\n    content: x\n", "/etc/x"},
		{"content and dir", head + "files:\n  - path: /etc/x\n    content: x\n    dir: true\n", "/etc/x"},
		{"dir and symlink", head + "files:\n  - path: /etc/x\n    dir: true\n    symlink: y\n", "/etc/x"},
		{"nothing to do", head + "files:\n  - path: /etc/x\n", "/etc/x"},
		{"symlink escaping", head + "files:\n  - path: /etc/l\n    symlink: ../../x\n", "/etc/l"},
		{"symlink escaping deep", head + "files:\n  - path: /a/b/l\n    symlink: ../c/../../../x\n", "/a/b/l"},
		{"remove relative", head + "remove: [usr/share]\n", "remove[0]"},
		{"remove node state", head + "remove: [/var/lib/strata]\n", "remove[0]"},
		{"service unit without suffix", head + "services:\n  - unit: web\n", "web"},
		{"service relative path", head + "services:\n  - unit: a.service\n    paths: [etc/a]\n", "a.service"},
		{"service reload relative", head + "services:\n  - unit: a.service\n    reload: [etc/a]\n", "a.service"},
		{"two base kinds", head + "base:\n  dir: rootfs\n  tar: rootfs.tar\n", "base.dir and base.tar"},
		{"three base kinds", head + "base:\n  tar: a.tar\n  image: a.squashfs\n  debootstrap: {suite: bookworm}\n", "base.tar and base.image and base.debootstrap"},
		{"preserve with tar", head + "base:\n  tar: a.tar\n  preserve: true\n", "base.preserve"},
		{"image not squashfs", head + "base:\n  image: a.img\n", "base.image"},
		{"unknown debootstrap option", head + "base:\n  debootstrap:\n    suite: bookworm\n    components: [main]\n", "components"},
		{"debootstrap without suite", head + "base:\n  debootstrap: {variant: minbase}\n", "base.debootstrap.suite"},
		{"debootstrap bad suite", head + "base:\n  debootstrap: {suite: \"book worm\"}\n", "base.debootstrap.suite"},
		{"debootstrap bad variant", head + "base:\n  debootstrap: {suite: bookworm, variant: tiny}\n", "base.debootstrap.variant"},
		{"debootstrap bad package", head + "base:\n  debootstrap: {suite: bookworm, include: [nginx, \"a,b\"]}\n", "base.debootstrap.include[1]"},
		{"debootstrap bad mirror", head + "base:\n  debootstrap: {suite: bookworm, mirror: \"ftp://x\"}\n", "base.debootstrap.mirror"},
		{"debootstrap bad arch", head + "base:\n  debootstrap: {suite: bookworm, arch: \"x/y\"}\n", "base.debootstrap.arch"},
		{"step with two kinds", head + "steps:\n  - run: \"true\"\n    remove: /etc/x\n", "steps[0]"},
		{"empty step", head + "steps:\n  - {}\n", "steps[0]"},
		{"unknown step key", head + "steps:\n  - shell: \"true\"\n", "shell"},
		{"step copy relative path", head + "steps:\n  - run: \"true\"\n  - copy: {path: etc/x, content: x}\n", "steps[1].copy.path"},
		{"step copy nothing to do", head + "steps:\n  - copy: {path: /etc/x}\n", "/etc/x"},
		{"step remove relative", head + "steps:\n  - remove: etc/x\n", "steps[0].remove"},
		{"step network unknown", head + "steps:\n  - run: \"true\"\n    network: bridge\n", "steps[0].network"},
		{"step network not run", head + "steps:\n  - remove: /etc/x\n    network: none\n", "steps[0].network"},
		{"step remove node state", head + "steps:\n  - remove: /var/lib/strata\n", "steps[0].remove"},
		{"unknown strata key", head + "strata: {bin: x}\n", "bin"},
		{"not yaml", "line: [\n", ""},
		{"empty", "", ""},
		{"list document", "- line: demo\n", ""},
	}
	for _, tt := range tests {
		_, err := builder.ParseRecipe([]byte(tt.recipe))
		if !errors.Is(err, builder.ErrRecipe) {
			t.Errorf("%s: ParseRecipe = %v, want ErrRecipe", tt.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.mention)
		}
	}
}

func TestTreePath(t *testing.T) {
	if p, err := builder.TreePath("/etc/x"); err != nil || p != "etc/x" {
		t.Fatalf("TreePath(/etc/x) = %q, %v", p, err)
	}
	for _, bad := range []string{"etc/x", "", "/", "//etc", "/etc/./x", "/var/lib/strata/ledger.json", "/usr/lib/strata/image.json"} {
		if _, err := builder.TreePath(bad); !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("TreePath(%q) = %v, want ErrUnsafePath", bad, err)
		}
	}
	// The key directory is image content, not node state.
	if _, err := builder.TreePath("/usr/lib/strata/keys/x.pub"); err != nil {
		t.Errorf("TreePath(keys) = %v", err)
	}
}

func writeRecipe(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadRecipe(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := builder.LoadRecipe(writeRecipe(t, dir, goodRecipe))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Path("tool"); got != filepath.Join(dir, "tool") {
		t.Errorf("Path(tool) = %s", got)
	}
	if got := r.Path("/abs/x"); got != "/abs/x" {
		t.Errorf("Path(/abs/x) = %s", got)
	}

	// A missing src is a recipe error naming the file step and the key.
	missing := strings.Replace(goodRecipe, "src: tool", "src: no-such-tool", 1)
	_, err = builder.LoadRecipe(writeRecipe(t, dir, missing))
	if !errors.Is(err, builder.ErrRecipe) {
		t.Errorf("missing src: LoadRecipe = %v, want ErrRecipe", err)
	}
	if err == nil || !strings.Contains(err.Error(), "/usr/bin/tool") || !strings.Contains(err.Error(), "src") {
		t.Errorf("missing src: error %v does not name the step and key", err)
	}

	// A missing base dir, or a base that is a file, is a recipe error.
	for _, base := range []string{"no-such-dir", "tool"} {
		text := strings.Replace(goodRecipe, "dir: rootfs", "dir: "+base, 1)
		_, err := builder.LoadRecipe(writeRecipe(t, dir, text))
		if !errors.Is(err, builder.ErrRecipe) || !strings.Contains(err.Error(), "base.dir") {
			t.Errorf("base %s: LoadRecipe = %v, want ErrRecipe naming base.dir", base, err)
		}
	}

	// Parse errors carry the recipe's path.
	p := writeRecipe(t, dir, "line: demo\nversion: 1.0\n")
	if _, err := builder.LoadRecipe(p); !errors.Is(err, builder.ErrRecipe) || !strings.Contains(err.Error(), p) {
		t.Errorf("LoadRecipe(bad version) = %v, want ErrRecipe naming %s", err, p)
	}
	if _, err := builder.LoadRecipe(filepath.Join(dir, "absent.yaml")); err == nil {
		t.Error("LoadRecipe of a missing file succeeded")
	}
}

func TestLoadRecipeHostPaths(t *testing.T) {
	dir := t.TempDir()
	head := "line: a\nversion: 1.0.0\n"
	for _, tt := range []struct{ text, mention string }{
		{head + "base:\n  tar: no-such.tar\n", "base.tar"},
		{head + "base:\n  image: no-such.squashfs\n", "base.image"},
		{head + "strata: {binary: no-such-strata}\n", "strata.binary"},
		{head + "steps:\n  - copy: {path: /etc/x, src: no-such-file}\n", "/etc/x"},
	} {
		_, err := builder.LoadRecipe(writeRecipe(t, dir, tt.text))
		if !errors.Is(err, builder.ErrRecipe) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("%q: LoadRecipe = %v, want ErrRecipe naming %s", tt.text, err, tt.mention)
		}
	}
}
