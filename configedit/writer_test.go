package configedit_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/configedit"
	"github.com/strata-dev/strata/overlay"
)

// config get names the element of the line that last wrote the file: the
// image until an overlay writes it, then that overlay (its signer
// verified), not a later overlay that left the file alone, at the head
// and at an older version.
func TestLastChangeNamesTheWriter(t *testing.T) {
	ctx := context.Background()
	dir, key := newRepo(t)
	_, at, w, err := configedit.LastChange(ctx, dir, "", "/etc/app/app.conf", "")
	if err != nil || at != "1.0.0" || !w.Image || w.Version != "1.0.0" || w.Created == "" {
		t.Fatalf("at the image: %s %+v (%v)", at, w, err)
	}
	if _, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/app/app.conf", Content: []byte("port 81\n")}}, configedit.SetOptions{Key: key}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "motd")
	if err := os.WriteFile(src, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.Create(ctx, dir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: src}}}, overlay.CreateOptions{Version: "1.0.2"}); err != nil {
		t.Fatal(err)
	}
	b, at, w, err := configedit.LastChange(ctx, dir, "", "/etc/app/app.conf", "")
	if err != nil || at != "1.0.2" || string(b) != "port 81\n" || w.Image || w.Version != "1.0.1" || !w.Verified || w.Signer != key.ID() || w.Created == "" {
		t.Fatalf("at the head: %s %q %+v (%v), want written by 1.0.1, signed by %s", at, b, w, err, key.ID())
	}
	if _, _, w, err = configedit.LastChange(ctx, dir, "", "/etc/app/app.conf", "1.0.0"); err != nil || !w.Image {
		t.Fatalf("at 1.0.0: %+v (%v), want the image", w, err)
	}
}
