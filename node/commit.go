package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// stagedRunner is a backend that can run a command against a staged
// change before it switches: the overlayfs backend runs it in a private
// mount namespace that already sees the new stacks at the real paths.
type stagedRunner interface {
	RunStaged(ctx context.Context, t nodestate.Txn, argv []string) (string, error)
}

// nodeBases gives an overlay's patches the content they were made
// against from the node's own tree: the file at the path, read beneath
// the root without following a symlink. It must be the content the
// node's head (before) has there, and that the patch names; else the
// error says which it is not, and nothing has changed.
func nodeBases(n nodestate.Node, before tree.State) tree.Bases {
	return func(_ context.Context, path, sum string) ([]byte, error) {
		if e := before[path]; e.Type != manifests.TypeFile || e.SHA256 != sum {
			return nil, fmt.Errorf("the patch was made against content %.12s, the node's head has %s there", sum, describeFile(e))
		}
		b, err := safefile.ReadBeneath(n.Root, path, manifests.MaxPatchTarget)
		if err != nil {
			return nil, fmt.Errorf("reading the node's file: %w", err)
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			return nil, errors.New("the node's file drifted from its head (see verify-sequence --files); restore it before applying")
		}
		return b, nil
	}
}

// describeFile names what a tree holds at a path, for messages.
func describeFile(e manifests.Entry) string {
	switch e.Type {
	case manifests.TypeFile:
		return fmt.Sprintf("content %.12s", e.SHA256)
	case "":
		return "nothing"
	}
	return "a " + string(e.Type)
}

// batchBases gives the k-th overlay of a batch the bases of its patches
// before anything of the batch has changed the node: what an earlier
// overlay of the batch writes at the path, else the node's own file; each
// must be the content the tree before overlay k has there.
func batchBases(n nodestate.Node, todo []*archive.Archive, k int, states map[string][2]tree.State) tree.Bases {
	before := states[todo[k].Manifest.Version][0]
	return func(ctx context.Context, path, sum string) ([]byte, error) {
		if e := before[path]; e.Type != manifests.TypeFile || e.SHA256 != sum {
			return nil, fmt.Errorf("the patch was made against content %.12s, the tree before it has %s there", sum, describeFile(e))
		}
		for j := k - 1; j >= 0; j-- {
			if todo[j].Manifest.Carries(path) {
				return todo[j].File(ctx, batchBases(n, todo, j, states), path)
			}
		}
		return nodeBases(n, states[todo[0].Manifest.Version][0])(ctx, path, sum)
	}
}

// validationTimeout bounds a service's validation command.
const validationTimeout = time.Minute

// applyOne carries one verified overlay through the backend: stage it,
// validate the affected services' configuration against it, keep its
// signed manifest, switch the tree, run the restart plan and check health,
// and only then commit. When a restart or the health check fails the
// change is taken back, the same units are restarted on the old tree, and
// the ledger records the failed attempt.
func (h *Node) applyOne(ctx context.Context, v *view.View, a *archive.Archive, states [2]tree.State, plan *Plan) error {
	b, r, progress := h.b, h.o.Restarter, h.o.Progress
	n := b.Node()
	m := a.Manifest
	last := v.Ledger.Last()
	rec := manifests.LedgerEntry{
		Seq:        len(v.Ledger.Entries),
		Action:     manifests.LedgerApply,
		Line:       m.Line,
		Version:    m.Version,
		Digest:     a.Digest,
		Image:      last.Image,
		Head:       manifests.Ref{Version: m.Version, Digest: a.Digest},
		TreeDigest: states[1].Digest(),
		Pending:    plan.Actions,
		Signer:     a.KeyID,
		Overwrote:  plan.Overwrote,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}
	payload := func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error {
		return a.Payload(ctx, nodeBases(n, states[0]), fn)
	}
	t, err := b.Stage(ctx, &nodestate.Change{Manifest: m, Payload: payload, Record: rec, Before: states[0], After: states[1]})
	if err != nil {
		return err
	}
	cat := v.Catalog()
	if m.Catalog != nil {
		cat = *m.Catalog
	}
	if !h.o.Offline {
		if err := validate(ctx, b, t, plan, cat, progress); err != nil {
			return errors.Join(err, t.Abort(ctx))
		}
	}
	// From here until the commit, a change taken back also takes its
	// stored manifest with it (a disk that filled leaves nothing behind).
	abort := func(err error) error {
		if aerr := t.Abort(ctx); aerr != nil {
			return errors.Join(err, aerr) // the next run's recovery finishes it
		}
		return errors.Join(err, n.DropManifest(m.Version))
	}
	if err := n.StoreManifest(m.Version, a.Raw, a.Sig); err != nil {
		return abort(err)
	}
	if err := t.Switch(ctx); err != nil {
		return errors.Join(err, n.DropManifest(m.Version))
	}
	req := RestartPlan{Actions: plan.Actions, Catalog: cat, Changed: catalog.ChangedPaths(m, states[0])}
	if r != nil {
		if err := n.MarkRestarting(m.Version); err != nil {
			return abort(err)
		}
		fault.Point("restarting")
		reached, daemonDone := 0, false
		res, err := runPlan(ctx, r, req, h.noteFor("apply "+m.Version), func(sa manifests.ServiceAction) {
			progress(fmt.Sprintf("%s %s", sa.Action, sa.Unit))
			plan.Restarted = append(plan.Restarted, sa)
			if sa.Unit != "" {
				reached++
			} else {
				daemonDone = true
			}
		})
		plan.Live = res
		if err != nil {
			// The unit steps that ran, and the one that failed; none
			// when the manager's own reload or re-exec failed first.
			if res == nil || !(res.DaemonReexec || res.DaemonReload) || daemonDone {
				reached++
			}
			back := RestartPlan{Actions: plan.Actions, Catalog: v.Catalog(), Changed: req.Changed}
			return takeBack(ctx, n, t, v.Ledger, rec, r, back, res, reached, err, h.noteFor("taking "+m.Version+" back"), progress)
		}
	}
	l, err := t.Commit(ctx, v.Ledger)
	if l == nil {
		// The ledger does not hold the record: nothing committed.
		return abort(err)
	}
	if err != nil {
		// Committed; only the cleanup after it failed, which the next
		// run's recovery finishes. Never take a committed change back.
		return fmt.Errorf("overlay %s committed, but finishing it failed (the next run retries): %w", m.Version, err)
	}
	if r == nil {
		return nil
	}
	if err := recordRestarts(n, l, plan.Actions, rebootDue(plan.Live)); err != nil {
		return err
	}
	return n.ClearRestarting()
}

// validate runs the validation command of every service the plan
// restarts or reloads against the staged change; a failure refuses the
// overlay before the node's tree changes, and so does a backend that
// cannot run one (every backend strata ships can).
func validate(ctx context.Context, b nodestate.Backend, t nodestate.Txn, plan *Plan, cat manifests.Catalog, progress func(string)) error {
	vs := catalog.ValidationsFor(cat, plan.Actions)
	if len(vs) == 0 {
		return nil
	}
	sr, ok := b.(stagedRunner)
	if !ok {
		name, _ := b.Node().Backend()
		return fmt.Errorf("overlay %s: %s needs validating, and the node's %s backend cannot run a command against a staged change: %w", plan.Version, vs[0].Unit, name, ErrValidation)
	}
	for _, v := range vs {
		argv := strings.Join(v.Argv, " ")
		progress(fmt.Sprintf("validating %s: %s", v.Unit, argv))
		vctx, cancel := context.WithTimeout(ctx, validationTimeout)
		out, err := sr.RunStaged(vctx, t, v.Argv)
		cancel()
		if err != nil {
			return fmt.Errorf("overlay %s %w on the node: %s does not validate: %s", plan.Version, ErrValidation, v.Unit, catalog.Outcome(v.Argv, err, out))
		}
		plan.Validated = append(plan.Validated, v.Unit)
	}
	return nil
}

// takeBack undoes a switched change whose restarts or health check failed
// (cause), restarts the same units on the old tree and records the failed
// attempt. With the systemd restarter the units come from the forward
// resolution fwd (its first reached steps), restarted whatever their
// state: the change may have left one failed.
func takeBack(ctx context.Context, n nodestate.Node, t nodestate.Txn, l *manifests.Ledger, rec manifests.LedgerEntry, r Restarter, req RestartPlan, fwd *systemd.Resolved, reached int, cause error, ln loadNote, progress func(string)) error {
	progress(fmt.Sprintf("restart failed, taking %s back: %v", rec.Version, cause))
	if err := t.Abort(ctx); err != nil {
		return fmt.Errorf("%w; taking %s back failed too, the next run retries: %w", cause, rec.Version, err)
	}
	if err := n.DropManifest(rec.Version); err != nil {
		return fmt.Errorf("overlay %s taken back: %w; %w", rec.Version, cause, err)
	}
	// The failed attempt is recorded with its restarts due before they
	// run on the old tree: if strata dies while they run, the debt stays.
	l, err := n.Commit(l, failedRecord(l, rec, cause.Error(), req.Actions))
	if err != nil {
		return fmt.Errorf("overlay %s taken back: %w; recording the failure: %w", rec.Version, cause, err)
	}
	if err := n.ClearRestarting(); err != nil {
		return fmt.Errorf("overlay %s taken back: %w; %w", rec.Version, cause, err)
	}
	fault.Point("taken-back")
	var undone []manifests.ServiceAction
	report := func(sa manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", sa.Action, sa.Unit))
		undone = append(undone, sa)
	}
	rerr := r.Undo(ctx, req, fwd, reached, report)
	if err := ln.record(ctx, req.Catalog, undone); err != nil {
		progress("warning: " + err.Error())
	}
	if rerr != nil {
		return fmt.Errorf("overlay %s taken back: %w; restarts after taking it back failed too, they stay due: %w", rec.Version, cause, rerr)
	}
	if err := recordRestarts(n, l, req.Actions, nil); err != nil {
		return fmt.Errorf("overlay %s taken back: %w; recording the restarts: %w", rec.Version, cause, err)
	}
	return fmt.Errorf("overlay %s taken back: %w", rec.Version, cause)
}

// recordRestarts appends a restart record: done settles those actions'
// debt; reboot lists units that take the change only at the next boot.
// recordFailedRestart records that restarting actions failed (cause):
// each becomes restart debt, naming the failure, and the record carries
// the error, which status, history, health and the fleet view show until
// a restart that passes settles the debt.
func recordFailedRestart(n nodestate.Node, l *manifests.Ledger, actions []manifests.ServiceAction, cause error) error {
	why := manifests.RecordText("a restart failed: " + cause.Error())
	owed := make([]manifests.ServiceAction, 0, len(actions))
	for _, a := range actions {
		a.Because = []string{why}
		owed = append(owed, a)
	}
	last := l.Last()
	_, err := n.Commit(l, manifests.LedgerEntry{
		Action: manifests.LedgerRestart, Line: last.Line, Version: last.Version, Digest: last.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Pending: owed,
		Error: manifests.RecordText(cause.Error()), Time: time.Now().UTC().Format(time.RFC3339),
	})
	return err
}

func recordRestarts(n nodestate.Node, l *manifests.Ledger, done, reboot []manifests.ServiceAction) error {
	if len(done) == 0 && len(reboot) == 0 {
		return nil
	}
	last := l.Last()
	_, err := n.Commit(l, manifests.LedgerEntry{
		Action: manifests.LedgerRestart, Line: last.Line, Version: last.Version, Digest: last.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Done: done, Reboot: reboot,
		Time: time.Now().UTC().Format(time.RFC3339),
	})
	return err
}
