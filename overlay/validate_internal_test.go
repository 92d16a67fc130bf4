package overlay

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// Staging a change for validation never writes through a link in the
// staged tree: an entry below an absolute link to a host directory is
// refused and the host directory stays empty.
func TestStageChangeStaysBeneath(t *testing.T) {
	dir, host := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	m := &manifests.OverlayManifest{Entries: []manifests.Entry{{Path: "etc/evil", Type: manifests.TypeFile, Mode: 0o644}}}
	open := func(manifests.Entry) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("")), nil }
	if err := stageChange(dir, m, open); err == nil {
		t.Fatal("staged an entry below a link")
	}
	m = &manifests.OverlayManifest{Deletes: []string{"etc/x"}}
	if err := os.WriteFile(filepath.Join(host, "x"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = stageChange(dir, m, open)
	if des, _ := os.ReadDir(host); len(des) != 1 || des[0].Name() != "x" {
		t.Errorf("the host directory behind the link changed: %v", des)
	}
}
