package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// Files given newest first (a shell glob puts 1.0.10 before 1.0.9) are
// applied oldest first, and a progress line says so: not refused as
// "missing" the overlays that are right there.
func TestFilesAppliedOldestFirst(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	var files []string
	for _, v := range []string{"1.0.1", "1.0.2", "1.0.3"} {
		files = append(files, f.Create(v, f.Change("/etc/app/app.conf", "port "+v+"\n")).Path)
	}
	var lines []string
	rep, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{files[2], files[0], files[1]}}, node.ApplyOptions{},
		node.Options{Progress: func(s string) { lines = append(lines, s) }})
	if err != nil {
		t.Fatalf("files out of order: %v", err)
	}
	if rep.To.Version != "1.0.3" || len(rep.Plans) != 3 {
		t.Fatalf("applied to %s in %d steps, want 1.0.3 in 3", rep.To.Version, len(rep.Plans))
	}
	if !strings.Contains(strings.Join(lines, "\n"), "not given oldest first: applying them in version order, 1.0.1, 1.0.2, 1.0.3") {
		t.Errorf("no progress line said the order changed:\n%s", strings.Join(lines, "\n"))
	}
}
