package overlay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/manifests"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// An overlay that replaced a file with a directory is reverted to the
// file: the directory's contents go with it, without a delete that
// would fail once the file is back.
func TestRevertDirectoryOverFile(t *testing.T) {
	f := fixture.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.conf"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Create("1.0.1", Change{Adds: []Add{{Dest: "/etc/motd", Src: dir}}})
	rev, err := Revert(context.Background(), f.Repo, "1.0.1", f.Key, RevertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := rev.Created.Manifest
	if len(m.Entries) != 1 || m.Entries[0].Path != "etc/motd" || m.Entries[0].Type != manifests.TypeFile || len(m.Deletes) != 0 {
		t.Fatalf("revert of a directory over a file: entries %+v deletes %v", m.Entries, m.Deletes)
	}
}
