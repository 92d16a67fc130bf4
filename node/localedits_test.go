package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// Nothing changes silently (issue 22): an apply that would replace or
// delete what was changed on the node since its head (content, mode, a
// file the head lacks) is refused, naming every such path, and changes
// nothing; a change elsewhere is no concern of it. With Force it goes
// ahead, and the ledger and the history name what it overwrote.
func TestApplyRefusesToOverwriteLocalEdits(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	c := f.Create("1.0.1", overlay.Change{
		Adds: []overlay.Add{
			{Dest: "/etc/app/app.conf", Src: f.HostFile("port 81\n")},
			{Dest: "/etc/app/conf.d/new.conf", Src: f.HostFile("new\n")},
			{Dest: "/usr/bin/app", Src: f.HostFile("#!/bin/sh\nexec sleep 1\n")},
		},
		Deletes: []string{"/etc/motd"},
	})
	root := f.Provision()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	conf, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf"))
	must(err)
	conf[0] ^= 0x20 // content, the size unchanged
	must(os.WriteFile(filepath.Join(root, "etc/app/app.conf"), conf, 0o644))
	must(os.Chmod(filepath.Join(root, "usr/bin/app"), 0o700))                                             // mode
	must(os.WriteFile(filepath.Join(root, "etc/app/conf.d/new.conf"), []byte("mine\n"), 0o644))           // not in the head
	must(os.WriteFile(filepath.Join(root, "etc/motd"), []byte("hi from ops\n"), 0o644))                   // deleted by the overlay (another size)
	must(os.WriteFile(filepath.Join(root, "usr/share/doc/readme"), []byte("edited, untouched\n"), 0o644)) // not the overlay's
	before := fixture.Snap(t, root)

	_, err = apply(root, c.Path)
	fixture.ErrIs(t, err, node.ErrLocalEdit, "/etc/app/app.conf, /etc/app/conf.d/new.conf, /etc/motd, /usr/bin/app changed on the node", "--force")
	fixture.AssertUnchanged(t, root, before)

	rep, err := nodetest.Apply(ctx, root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{Force: true}, node.Options{})
	if err != nil {
		t.Fatalf("apply --force: %v", err)
	}
	want := []string{"etc/app/app.conf", "etc/app/conf.d/new.conf", "etc/motd", "usr/bin/app"}
	if got := rep.Plans[0].Overwrote; !slices.Equal(got, want) {
		t.Errorf("plan overwrote %v, want %v", got, want)
	}
	h, err := nodetest.History(root)
	if err != nil {
		t.Fatal(err)
	}
	last := h.Entries[len(h.Entries)-1]
	if !slices.Equal(last.Overwrote, want) || node.Describe(last.LedgerEntry) != "applied 1.0.1, overwriting what was changed on the node: /etc/app/app.conf, /etc/app/conf.d/new.conf, /etc/motd, /usr/bin/app" {
		t.Errorf("ledger record %+v says %q", last.Overwrote, node.Describe(last.LedgerEntry))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr/share/doc/readme")); string(b) != "edited, untouched\n" {
		t.Errorf("a local edit the overlay does not touch changed: %q", b)
	}
}
