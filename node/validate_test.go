package node_test

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// Every backend validates before it switches: a directory node runs the
// service's validation command in a sandbox whose tree is the node's
// with the staged change laid over it (a new file, a changed one, a new
// directory, a deleted file, a root-only file left alone), and refuses a
// change the command rejects, even one published past validation with
// --skip-validation: the node does not change.
func TestDirNodeValidatesBeforeSwitch(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t, fixture.WithValidator())
	root := f.Provision()

	// Published with a skip, so the node's validation is the only one.
	good := overlay.Change{
		Adds: []overlay.Add{
			{Dest: "/etc/app/app.conf", Src: f.HostFile("expect /etc/app/conf.d/b.conf b\nexpect /etc/app/conf.d/a.conf a\nexpect /etc/app/secret s3cret\nforbid /etc/motd\nrequire /usr/share/new/dir/file\n")},
			{Dest: "/etc/app/conf.d/b.conf", Src: f.HostFile("b\n")},
			{Dest: "/usr/share/new/dir/file", Src: f.HostFile("new\n")},
		},
		Deletes: []string{"/etc/motd"},
	}
	c, err := overlay.Create(ctx, f.Repo, f.Key, good, overlay.CreateOptions{Version: "1.0.1", SkipValidation: "validated on the node only"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := apply(root, c.Path)
	if err != nil {
		t.Fatalf("applying a change the service validates: %v", err)
	}
	if len(rep.Plans) != 1 || !slices.Equal(rep.Plans[0].Validated, []string{"app.service"}) {
		t.Fatalf("plans %+v, want app.service validated", rep.Plans)
	}

	before := fixture.Snap(t, root)
	forged, err := overlay.Create(ctx, f.Repo, f.Key, f.Change("/etc/app/app.conf", "port 81\nbad port\n"),
		overlay.CreateOptions{Version: "1.0.2", SkipValidation: "forged past the publisher's validation"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = apply(root, forged.Path)
	fixture.ErrIs(t, err, node.ErrValidation, "app.service does not validate", "/usr/bin/app-validate", "app.conf: bad port")
	fixture.AssertUnchanged(t, root, before)
}
