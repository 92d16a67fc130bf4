package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// resolving is a restarter of the test's own: it resolves every plan to
// one step per action, fails Run when told to, and records Undo. The
// engine must use any restarter this way, not only its own types.
type resolving struct {
	fail  bool
	runs  int
	undid *systemd.Resolved
}

func (r *resolving) Resolve(_ context.Context, p node.RestartPlan) (*systemd.Resolved, error) {
	res := &systemd.Resolved{}
	for _, a := range p.Actions {
		res.Steps = append(res.Steps, systemd.Step{Unit: "resolved-" + a.Unit, Action: systemd.VerbTryRestart, From: a.Unit})
	}
	return res, nil
}

func (r *resolving) Run(_ context.Context, p node.RestartPlan, res *systemd.Resolved, report func(manifests.ServiceAction)) error {
	r.runs++
	if res == nil {
		return errors.New("Run without the resolution Resolve gave")
	}
	if r.fail {
		return node.ErrRestart
	}
	for _, st := range res.Steps {
		report(manifests.ServiceAction{Unit: st.Unit, Action: manifests.ActionRestart})
	}
	return nil
}

func (r *resolving) Undo(_ context.Context, _ node.RestartPlan, fwd *systemd.Resolved, _ int, _ func(manifests.ServiceAction)) error {
	r.undid = fwd
	return nil
}

func TestRestarterOfYourOwn(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 82\n"))
	root := f.Provision()

	r := &resolving{}
	dry, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{DryRun: true}, node.Options{Restarter: r})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Plans) != 1 || dry.Plans[0].Live == nil || len(dry.Plans[0].Live.Steps) != 1 || dry.Plans[0].Live.Steps[0].Unit != "resolved-app.service" || r.runs != 0 {
		t.Fatalf("dry run: plans %+v, %d runs; want the restarter's resolution and nothing run", dry.Plans, r.runs)
	}

	r.fail = true
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{Restarter: r}); !errors.Is(err, node.ErrRestart) {
		t.Fatalf("apply with a failing restarter: %v, want node.ErrRestart", err)
	}
	if r.undid == nil || r.undid.Steps[0].Unit != "resolved-app.service" {
		t.Fatalf("Undo got %+v, want the resolution the failed run had", r.undid)
	}

	r.fail = false
	rep, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{Restarter: r})
	if err != nil {
		t.Fatal(err)
	}
	if got := rsDescribe(rep.Plans[0].Restarted); !slices.Equal(got, []string{"resolved-app.service restart"}) {
		t.Errorf("restarted %q, want what the restarter resolved", got)
	}
	rsRequireNoDebt(t, root)
}
