package overlayfs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nodestate/overlayfs"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// On a node whose layers are directories (written before layer images),
// repair rebuilds exactly the drifted layers (a changed file, a removed
// whiteout, an extra file, a symlink planted to a directory outside) from
// the repository, never following the symlink, leaves the others alone,
// and the audit passes; a repository whose overlay is not the one the
// node applied is refused before anything changes; a node without drift
// is left alone.
func TestRepairRebuildsDriftedLayerDirs(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc, /usr]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n  - path: /usr/share/x\n    content: \"x\\n\"\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app/app.conf": "port 80\n", "rootfs/etc/motd": "hi\n"})
	write := func(name, content string) string {
		p := filepath.Join(l.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	create := func(repoDir, version string, ch overlay.Change) {
		if _, err := overlay.Create(ctx, repoDir, l.key, ch, overlay.CreateOptions{Version: version}); err != nil {
			t.Fatal(err)
		}
	}
	create(l.repo, "1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/x", Src: write("x2", "x2\n")}}})
	create(l.repo, "1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app/app.conf", Src: write("c", "port 81\n")}}, Deletes: []string{"/etc/motd"}})
	root := newNode(t, l.res.Image)
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	toLayerDirs(t, l.res.Image, root)
	rep, err := nodetest.Repair(ctx, root, node.Source{Repo: l.repo}, node.Options{})
	if err != nil || len(rep.Drift) != 0 || len(rep.Layers) != 0 {
		t.Fatalf("repair of a clean node: %+v, %v", rep, err)
	}
	layers := layersOf(root)
	untouched, err := os.Stat(filepath.Join(layers, "1.0.1/usr/share/x"))
	if err != nil {
		t.Fatal(err)
	}
	// Drift in layer 1.0.2: content, a whiteout gone, an extra file, and
	// a symlink to a directory outside, with a file in it.
	l2 := filepath.Join(layers, "1.0.2")
	if err := os.WriteFile(filepath.Join(l2, "etc/app/app.conf"), []byte("port 9999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(l2, "etc/motd")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l2, "etc/extra"), []byte("planted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(l.dir, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	canary := write("outside/canary", "keep me\n")
	if err := os.Symlink(outside, filepath.Join(l2, "etc/evil")); err != nil {
		t.Fatal(err)
	}
	audit := func() *schema.Audit {
		t.Helper()
		a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: l.repo, Files: true})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := audit(); a.OK() {
		t.Fatal("the audit does not see the drift")
	}
	// A repository with another 1.0.2: refused, nothing rebuilt.
	other := filepath.Join(l.dir, "other")
	if _, err := repo.Init(context.Background(), other, l.res.Image, l.key); err != nil {
		t.Fatal(err)
	}
	create(other, "1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/x", Src: write("x2", "x2\n")}}})
	create(other, "1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app/app.conf", Src: write("c3", "port 82\n")}}, Deletes: []string{"/etc/motd"}})
	if _, err := nodetest.Repair(ctx, root, node.Source{Repo: other}, node.Options{}); !errors.Is(err, overlay.ErrSequence) {
		t.Fatalf("repair from a repository with another 1.0.2: %v, want ErrSequence", err)
	}
	if b, _ := os.ReadFile(filepath.Join(l2, "etc/app/app.conf")); string(b) != "port 9999\n" {
		t.Fatalf("the refused repair changed the layer: %q", b)
	}
	rep, err = nodetest.Repair(ctx, root, node.Source{Repo: l.repo}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Layers, " ") != "1.0.2" || len(rep.Drift) != 4 {
		t.Fatalf("repair: layers %v, drift %v; want layer 1.0.2 for 4 paths", rep.Layers, rep.Drift)
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "keep me\n" {
		t.Fatalf("the file behind the planted symlink: %q, %v", b, err)
	}
	if a := audit(); !a.OK() {
		t.Fatalf("audit after the repair: %+v", a.Findings)
	}
	led, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	if last := led.Last(); last.Action != manifests.LedgerRepair || strings.Join(last.Repaired, " ") != "1.0.2" || last.Head.Version != "1.0.2" {
		t.Errorf("the ledger's last record: %s %v at %s; want the repair of 1.0.2", last.Action, last.Repaired, last.Head.Version)
	}
	if n := len(led.Entries); n != 4 {
		t.Errorf("%d ledger records, want 4 (provision, two applies, one repair: the clean and the refused repairs record nothing)", n)
	}
	for p, want := range map[string]string{"etc/app/app.conf": "port 81\n", "usr/share/x": "x2\n"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("/%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/motd")); !os.IsNotExist(err) {
		t.Errorf("/etc/motd is back: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(layers, "1.0.1/usr/share/x")); err != nil || !os.SameFile(fi, untouched) {
		t.Error("layer 1.0.1, which did not drift, was rewritten")
	}
	if ents, _ := os.ReadDir(layers); len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("layers left: %v, want 1.0.1 and 1.0.2 only", names)
	}
}

// A repair interrupted right after the exchange (the stacks still on the
// drifted image, now .new-<v>.erofs) is settled by the next run: it restacks on
// the rebuilt layer before it removes the drifted copy.
func TestRepairInterruptedAfterExchange(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app.conf": "port 80\n"})
	ctx := context.Background()
	src := filepath.Join(l.dir, "c")
	if err := os.WriteFile(src, []byte("port 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.Create(ctx, l.repo, l.key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app.conf", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	root := newNode(t, l.res.Image)
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	layers := layersOf(root)
	layer, fresh := filepath.Join(layers, "1.0.1.erofs"), filepath.Join(layers, ".new-1.0.1.erofs")
	if out, err := exec.Command("cp", "-a", layer, fresh).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	flip(t, layer, 0)
	// What RebuildLayer has done when it dies after the exchange.
	led, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(led.Applied()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layers, "txn.json"), []byte(`{"kind":"repair","record":`+string(rec)+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, fresh, unix.AT_FDCWD, layer, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	st, err := nodetest.Status(ctx, root)
	if err != nil || !strings.Contains(st.Interrupted, "interrupted repair of layer 1.0.1") {
		t.Fatalf("status: %+v, %v", st, err)
	}
	// The next run settles it: the live stack shows the rebuilt layer.
	rep, err := nodetest.Repair(ctx, root, node.Source{Repo: l.repo}, node.Options{})
	if err != nil || len(rep.Drift) != 0 {
		t.Fatalf("repair after the interruption: %+v, %v", rep, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/app.conf")); err != nil || string(b) != "port 81\n" {
		t.Fatalf("/etc/app.conf = %q, %v", b, err)
	}
	for _, p := range []string{fresh, filepath.Join(layers, "txn.json")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
	checkImage(t, layer, appliedLayer(t, root, "1.0.1"))
	if m, _ := filepath.Glob(filepath.Join(root, "run/strata/layers/*")); len(m) != 1 {
		t.Errorf("layer images mounted: %v, want the rebuilt one only", m)
	}
}

// A layer image that no longer matches the record of its apply (a byte
// changed, or another genuine image planted in its place) is refused at
// activation: the stacks hold the layers below it, the activation, status
// and the audit name it, and an apply waits for the repair; the repair
// rewrites it byte for byte from its overlay, and the node is whole.
func TestLayerImageRefusedThenRepaired(t *testing.T) {
	recipe := "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nhierarchies: [/etc, /usr]\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n  - path: /usr/share/x\n    content: \"x\\n\"\n"
	l := newLine(t, recipe, map[string]string{"rootfs/etc/app.conf": "port 80\n"})
	ctx := context.Background()
	write := func(name, content string) string {
		p := filepath.Join(l.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, o := range []struct{ v, dest, content string }{{"1.0.1", "/usr/share/x", "x2\n"}, {"1.0.2", "/etc/app.conf", "port 81\n"}, {"1.0.3", "/etc/app.conf", "port 82\n"}} {
		if _, err := overlay.Create(ctx, l.repo, l.key, overlay.Change{Adds: []overlay.Add{{Dest: o.dest, Src: write(o.v, o.content)}}}, overlay.CreateOptions{Version: o.v}); err != nil {
			t.Fatal(err)
		}
	}
	root := newNode(t, l.res.Image)
	state := filepath.Join(filepath.Dir(root), "state")
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo, Through: "1.0.2"}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	layers := layersOf(root)
	img1, img2 := filepath.Join(layers, "1.0.1.erofs"), filepath.Join(layers, "1.0.2.erofs")
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return string(b)
	}
	// A byte of 1.0.2's image changed while the node is down.
	size2 := appliedLayer(t, root, "1.0.2").Size
	shutdown(t, root)
	flip(t, img2, size2/2)
	rep := bootReport(t, l.res.Image, state, root)
	if rep.LayerRefused == nil || rep.LayerRefused.Version != "1.0.2" || !strings.Contains(rep.LayerRefused.Error, "sha256") || strings.Join(rep.Layers, " ") != "1.0.1" {
		t.Fatalf("activation with 1.0.2's image changed: %+v", rep)
	}
	if read("etc/app.conf") != "port 80\n" || read("usr/share/x") != "x2\n" {
		t.Fatalf("the tree with 1.0.2 refused: app.conf %q, x %q; want 1.0.1's", read("etc/app.conf"), read("usr/share/x"))
	}
	// Node history keeps the refusal, once while it stands.
	lastRefused := func(version string, records int) {
		t.Helper()
		h, err := nodetest.History(root)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range h.Entries {
			if e.Action == manifests.LedgerRefused {
				n++
			}
		}
		last := h.Entries[len(h.Entries)-1]
		if n != records || last.Action != manifests.LedgerRefused || last.Version != version || last.Digest == "" ||
			!strings.Contains(last.Error, "layer image refused") || last.Head.Version != "1.0.2" {
			t.Fatalf("history after %s was refused: %d refused records, want %d; last %+v", version, n, records, last)
		}
	}
	lastRefused("1.0.2", 1)
	if rep, err := nodetest.Activate(ctx, root, ""); err != nil || rep.LayerRefused == nil {
		t.Fatalf("activation again with 1.0.2 refused: %+v, %v", rep, err)
	}
	lastRefused("1.0.2", 1)
	st, err := nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if li := st.LayerIntegrity; li == nil || li.Mode != schema.LayersDigestChecked || li.Images != 2 || li.Refused == nil || li.Refused.Version != "1.0.2" || li.Refused.Cause != schema.RefusedImage {
		t.Fatalf("status: %+v", st.LayerIntegrity)
	}
	if h, err := agent.ReadHealth(ctx, root, nil); err != nil || h.LayerIntegrity == nil || h.LayerIntegrity.Refused == nil || h.LayerIntegrity.Refused.Version != "1.0.2" {
		t.Fatalf("health with 1.0.2 refused: %+v, %v", h, err)
	}
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); !errors.Is(err, overlayfs.ErrLayerRefused) {
		t.Fatalf("apply of 1.0.3 over a refused layer: %v, want ErrLayerRefused", err)
	}
	a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Files: true})
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, filepath.Join(root, manifests.StateDir, "layers/1.0.2.erofs"))
	found := false
	for _, f := range a.Findings {
		found = found || f.Kind == "drift" && f.Path == rel && strings.Contains(f.Message, "restart --repair")
	}
	if a.OK() || !found {
		t.Fatalf("audit with 1.0.2's image changed: %+v", a.Findings)
	}
	// Another genuine image planted for 1.0.1: refused at 1.0.1, so
	// nothing is stacked.
	shutdown(t, root)
	raw, err := os.ReadFile(img2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img1, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	rep = bootReport(t, l.res.Image, state, root)
	if rep.LayerRefused == nil || rep.LayerRefused.Version != "1.0.1" || len(rep.Layers) != 0 {
		t.Fatalf("activation with an image planted for 1.0.1: %+v", rep)
	}
	lastRefused("1.0.1", 2)
	if read("etc/app.conf") != "port 80\n" || read("usr/share/x") != "x\n" {
		t.Fatalf("the tree with 1.0.1 refused: app.conf %q, x %q; want the image's", read("etc/app.conf"), read("usr/share/x"))
	}
	// The repair rewrites both, as their applies wrote them.
	rr, err := nodetest.Repair(ctx, root, node.Source{Repo: l.repo}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rr.Layers, " ") != "1.0.1 1.0.2" {
		t.Fatalf("repair rebuilt %v, want 1.0.1 and 1.0.2", rr.Layers)
	}
	if h, err := nodetest.History(root); err != nil || h.Entries[len(h.Entries)-1].Action != manifests.LedgerRepair {
		t.Fatalf("history after the repair: %v, want a repair record last", err)
	}
	checkImage(t, img1, appliedLayer(t, root, "1.0.1"))
	checkImage(t, img2, appliedLayer(t, root, "1.0.2"))
	if read("etc/app.conf") != "port 81\n" || read("usr/share/x") != "x2\n" {
		t.Fatalf("after the repair: app.conf %q, x %q", read("etc/app.conf"), read("usr/share/x"))
	}
	if st, err := nodetest.Status(ctx, root); err != nil || st.LayerIntegrity == nil || st.LayerIntegrity.Refused != nil {
		t.Fatalf("status after the repair: %+v, %v", st, err)
	}
	if a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: l.repo, Files: true}); err != nil || !a.OK() {
		t.Fatalf("audit after the repair: %+v, %v", a, err)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "run/strata/layers/*")); len(m) != 2 {
		t.Errorf("layer images mounted after the repair: %v, want 1.0.1's and 1.0.2's", m)
	}
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: l.repo}, node.ApplyOptions{}, node.Options{}); err != nil || read("etc/app.conf") != "port 82\n" {
		t.Fatalf("apply of 1.0.3 after the repair: %v, app.conf %q", err, read("etc/app.conf"))
	}
	// gc removes images no layer of the stack is: a stray one, and a
	// new one a crash left behind.
	for _, p := range []string{"7.0.0.erofs", ".new-1.0.4.erofs"} {
		if err := os.WriteFile(filepath.Join(layers, p), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nodetest.GC(ctx, root, 1, node.Options{}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(layers); len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("layers after gc: %v, want the images of 1.0.1 to 1.0.3 only", names)
	}
}
