//go:build debian

package live_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/configedit"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/testnode"
)

// Issue 9, test 1 (the library side; tests/testdata/script/config.txtar
// drives the editor): an edit of nginx.conf on the Debian node image is
// checked by nginx's own validation command (nginx -t, the catalog's) run
// in the line's head tree with the edit in place. A broken edit publishes
// nothing; a valid one is published with its reload; an edit made against
// a head that has since moved is refused.
func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	img, err := testnode.DebianImage(t)
	if err != nil {
		t.Fatal(err)
	}
	key, err := sign.LoadKey(img.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img.Squashfs, key); err != nil {
		t.Fatal(err)
	}
	conf, head, err := configedit.Get(ctx, dir, "", "/etc/nginx/nginx.conf", "")
	if err != nil || head != "1.0.0" || !strings.Contains(string(conf), "worker_connections 768;") {
		t.Fatalf("get nginx.conf at %s: %v", head, err)
	}
	broken := strings.Replace(string(conf), "worker_connections 768;", "worker_connectionz 768;", 1)
	plan, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/nginx/nginx.conf", Content: []byte(broken)}}, configedit.SetOptions{Key: key})
	if !errors.Is(err, configedit.ErrValidation) || !strings.Contains(err.Error(), "worker_connectionz") {
		t.Fatalf("a broken nginx.conf: %v, want ErrValidation quoting nginx", err)
	}
	if plan != nil && plan.Published != nil {
		t.Fatal("published a broken nginx.conf")
	}
	if h, _ := configedit.Head(ctx, dir, ""); h != "1.0.0" {
		t.Fatalf("head %s after a refused edit", h)
	}

	good := strings.Replace(string(conf), "worker_connections 768;", "worker_connections 1024;", 1)
	plan, err = configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/nginx/nginx.conf", Content: []byte(good)}}, configedit.SetOptions{Key: key, Parent: "1.0.0"})
	if err != nil || plan.Published == nil || plan.To != "1.0.1" {
		t.Fatalf("a valid nginx.conf: %v", err)
	}
	if len(plan.Validated) != 1 || !strings.HasPrefix(plan.Validated[0], "nginx.service: /usr/sbin/nginx -t") {
		t.Errorf("validated %v, want nginx -t", plan.Validated)
	}
	if len(plan.Services) != 1 || plan.Services[0].Unit != "nginx.service" || plan.Services[0].Action != "reload" {
		t.Errorf("plan %+v, want a reload of nginx", plan.Services)
	}
	if got, _, err := configedit.Get(ctx, dir, "", "/etc/nginx/nginx.conf", ""); err != nil || string(got) != good {
		t.Fatalf("the head's nginx.conf is not the edit (%v)", err)
	}
	// An edit started at 1.0.0 is stale now.
	if _, err := configedit.Set(ctx, dir, []configedit.Edit{{Path: "/etc/nginx/nginx.conf", Content: []byte(conf)}}, configedit.SetOptions{Key: key, Parent: "1.0.0"}); !errors.Is(err, overlay.ErrHeadMoved) {
		t.Fatalf("an edit against an old head: %v, want ErrHeadMoved", err)
	}
}
