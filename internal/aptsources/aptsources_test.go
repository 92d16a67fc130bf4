package aptsources

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A Debian host's deb822 sources (the security archive first, as a
// host may list it) and one-line lists: the suite's archive wins, then
// the first main archive; disabled stanzas, deb-src, file: URIs and
// other files are skipped.
func TestMirror(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "sources.list.d", "a-security.sources"), `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
`)
	write(t, filepath.Join(dir, "sources.list.d", "debian.sources"), `# comment
Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
Enabled: no
URIs: http://off.example/debian
Suites: bookworm

Types: deb
URIs:
 file:/srv/local
 http://archive.example/debian
Suites: bookworm bookworm-updates
Components: main
`)
	write(t, filepath.Join(dir, "sources.list.d", "x.list.disabled"), "deb http://disabled.example/ bookworm main\n")
	write(t, filepath.Join(dir, "sources.list"), "# none\ndeb [arch=amd64 signed-by=/k.gpg] https://list.example/debian trixie main # main\n")
	for suite, want := range map[string]string{
		"bookworm": "http://archive.example/debian",
		"trixie":   "https://list.example/debian",
		"sid":      "https://list.example/debian", // the first main archive (sources.list is read first)
	} {
		if got, err := Mirror(dir, suite); err != nil || got != want {
			t.Errorf("Mirror(%s) = %q, %v, want %q", suite, got, err, want)
		}
	}
	empty := t.TempDir()
	write(t, filepath.Join(empty, "sources.list.d", "sec.sources"), "Types: deb\nURIs: http://s.example/\nSuites: bookworm-security\n")
	if _, err := Mirror(empty, "bookworm"); !errors.Is(err, ErrNone) {
		t.Errorf("only a security archive: %v, want ErrNone", err)
	}
	big := t.TempDir()
	write(t, filepath.Join(big, "sources.list"), string(make([]byte, maxFile+1)))
	if _, err := Mirror(big, "bookworm"); err == nil {
		t.Error("an oversized sources.list was read")
	}
}
