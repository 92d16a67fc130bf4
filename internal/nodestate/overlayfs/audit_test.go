package overlayfs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// The file audit judges what the stacks serve, not what the layer images
// on disk say: a changed config is drift even where every image's
// digest checks. Three ways root can serve one (each fooled a shortcut
// that took layer files by their manifest's digest): tampered bytes left
// in the page cache after the image was restored, a forged stack mounted
// over /etc under strata's name, and a refused layer whose image was
// restored afterwards (the stacks still lack it).
func TestAuditReadsWhatTheStacksServe(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc, /usr]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app.conf": "port 80\n"})
	ctx := context.Background()
	for _, o := range []struct{ v, dest, content string }{{"1.0.1", "/etc/motd", "hi\n"}, {"1.0.2", "/etc/app.conf", "port 81\n"}} {
		src := filepath.Join(l.dir, o.v)
		if err := os.WriteFile(src, []byte(o.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := overlay.Create(ctx, l.repo, l.key, overlay.Change{Adds: []overlay.Add{{Dest: o.dest, Src: src}}}, overlay.CreateOptions{Version: o.v}); err != nil {
			t.Fatal(err)
		}
	}
	root := newNode(t, l.res.Image)
	state := filepath.Join(filepath.Dir(root), "state")
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc/app.conf")
	img := filepath.Join(layersOf(root), "1.0.2.erofs")
	good, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(good, []byte("port 81\n"))
	if at < 0 {
		t.Fatal("app.conf's content is not in 1.0.2's image")
	}
	dropCaches := func() {
		t.Helper()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			t.Fatal(err)
		}
	}
	writeAt := func(b []byte) {
		t.Helper()
		f, err := os.OpenFile(img, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, int64(at)); err != nil {
			t.Fatal(err)
		}
	}
	servesDrift := func(what, served string) {
		t.Helper()
		if b, _ := os.ReadFile(conf); string(b) != served {
			t.Fatalf("%s: /etc/app.conf is %q, want %q served", what, b, served)
		}
		a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: l.repo, Files: true})
		if err != nil {
			t.Fatal(err)
		}
		var found *schema.Finding
		for i, f := range a.Findings {
			if f.Kind == "drift" && f.Path == "etc/app.conf" {
				found = &a.Findings[i]
			}
		}
		if a.OK() || found == nil {
			t.Fatalf("%s: the audit passes or does not name etc/app.conf: %+v", what, a.Findings)
		}
	}

	// Tampered, read, restored: the image's digest checks again.
	dropCaches()
	writeAt([]byte("port 99\n"))
	if b, _ := os.ReadFile(conf); string(b) != "port 99\n" {
		t.Fatalf("the tampered image serves %q", b)
	}
	writeAt([]byte("port 81\n"))
	servesDrift("tampered pages cached, image restored", "port 99\n")
	dropCaches()

	// A forged stack named like strata's.
	evil := t.TempDir()
	if err := os.WriteFile(filepath.Join(evil, "app.conf"), []byte("port 99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(root, "etc")
	if err := unix.Mount("strata", etc, "overlay", 0, "lowerdir="+evil+":"+etc); err != nil {
		t.Fatal(err)
	}
	servesDrift("a forged stack on /etc", "port 99\n")
	if err := unix.Unmount(etc, 0); err != nil {
		t.Fatal(err)
	}

	// Refused at activation, then restored: the stacks hold 1.0.1 only.
	shutdown(t, root)
	flip(t, img, int64(at))
	if rep := bootReport(t, l.res.Image, state, root); rep.LayerRefused == nil || rep.LayerRefused.Version != "1.0.2" {
		t.Fatalf("activation with 1.0.2's image changed: %+v", rep)
	}
	if err := os.WriteFile(img, good, 0o600); err != nil {
		t.Fatal(err)
	}
	servesDrift("a refused layer restored", "port 80\n")
}
