package configedit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/configedit"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// newRepo builds a small image with one service and starts a repository
// at it.
func newRepo(t *testing.T) (string, *sign.Key) {
	t.Helper()
	body := `line: demo
version: 1.0.0
epoch: 1700000000
files:
  - path: /etc/app/app.conf
    content: "port 80\n"
  - path: /etc/applink
    symlink: /tmp
  - path: /usr/lib/systemd/system/app.service
    content: "[Service]\nExecStart=/usr/bin/app\n"
  - path: /usr/bin/app
    content: "#!/bin/sh\n"
    mode: "0755"
services:
  - unit: app.service
    paths: [/etc/app]
`
	f := fixture.New(t, fixture.WithRecipe(body, nil))
	return f.Repo, f.Key
}

// TestSetRefusesMovedHead: a publication while the plan awaits
// confirmation (after Set's own early check) is caught when publishing,
// under the repository's lock, and nothing of the edit is published.
func TestSetRefusesMovedHead(t *testing.T) {
	ctx := context.Background()
	dir, key := newRepo(t)
	src := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(src, []byte("meanwhile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	confirm := func(*configedit.Plan) bool {
		if _, err := overlay.Create(ctx, dir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: src}}}, overlay.CreateOptions{Version: "1.0.5"}); err != nil {
			t.Fatal(err)
		}
		return true
	}
	_, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/app/app.conf", Content: []byte("port 81\n")}}, configedit.SetOptions{Key: key, Confirm: confirm})
	if !errors.Is(err, overlay.ErrHeadMoved) {
		t.Fatalf("Set = %v, want ErrHeadMoved", err)
	}
	if got, head, err := configedit.Get(ctx, dir, "", "/etc/app/app.conf", ""); err != nil || head != "1.0.5" || string(got) != "port 80\n" {
		t.Fatalf("head %s has %q (%v), want 1.0.5 with the old config", head, got, err)
	}
}

// TestSetPlansAsPublished: a new drop-in for a unit rebuilds the catalog;
// the plan Set shows (and would validate against) is the one published.
func TestSetPlansAsPublished(t *testing.T) {
	ctx := context.Background()
	dir, key := newRepo(t)
	plan, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/systemd/system/app.service.d/override.conf", Content: []byte("[Service]\nEnvironment=A=1\n")}}, configedit.SetOptions{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Services) != 1 || plan.Services[0].Unit != "app.service" || !plan.Services[0].DaemonReload {
		t.Fatalf("plan %+v, want a restart of app.service after daemon-reload", plan.Services)
	}
	if got := plan.Published.Manifest.Services; len(got) != 1 || got[0].Unit != plan.Services[0].Unit || got[0].Action != plan.Services[0].Action {
		t.Fatalf("published plan %+v differs from the one shown %+v", got, plan.Services)
	}
}

// TestSetRefusesPathsThroughLinks: an edit below a symlink of the image is
// refused before anything is staged or published.
func TestSetRefusesPathsThroughLinks(t *testing.T) {
	ctx := context.Background()
	dir, key := newRepo(t)
	_, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/applink/evil.conf", Content: []byte("x\n")}}, configedit.SetOptions{Key: key})
	if err == nil || !strings.Contains(err.Error(), "/etc/applink is a symlink") {
		t.Fatalf("Set = %v, want a refusal naming the symlink", err)
	}
	if _, err := os.Stat("/tmp/evil.conf"); err == nil {
		t.Fatal("the edit was written through the link")
	}
	if h, _ := configedit.Head(ctx, dir, ""); h != "1.0.0" {
		t.Fatalf("head %s", h)
	}
}
