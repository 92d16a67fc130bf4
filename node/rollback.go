package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// RollbackReport describes a rollback.
type RollbackReport struct {
	Root string `json:"root"`
	// Reverted is the last overlay undone (with --to, the oldest); Head
	// the node's head afterwards.
	Reverted manifests.Ref `json:"reverted"`
	Head     manifests.Ref `json:"head"`
	// Steps are the overlays undone, newest first, one ledger record
	// each.
	Steps []manifests.Ref `json:"steps"`
	// Actions are the restarts and reloads the rollback plans (with
	// several steps, their union, carried out once after the last).
	Actions   []manifests.ServiceAction `json:"actions"`
	Restarted []manifests.ServiceAction `json:"restarted,omitempty"`
	// Live is the plan as resolved against the running service manager.
	Live *systemd.Resolved `json:"live,omitempty"`
	// Held is the hold a rollback put on the node (strata rollback holds
	// it where it took it; the library's Rollback does not).
	Held *manifests.Hold `json:"held,omitempty"`
}

// Rollback reverts the node's overlays above version to (empty: the last
// one only) from the undo data kept when they were applied, newest first,
// each recorded as one rollback in the ledger; the restart plan for what
// they reverted runs once, after the last, through the node's Restarter
// (none: recorded as pending). to must be the node's starting point or
// one of the overlays it applied below its head; nothing changes
// otherwise. A step that fails leaves the ones before it done (and their
// restarts pending).
func (h *Node) Rollback(ctx context.Context, to string) (*RollbackReport, error) {
	return h.rollback(ctx, to, "")
}

// RollbackAndHold is Rollback, then, under the same lock (an agent
// waiting for it would otherwise re-apply first), Hold at the head it
// took the node to, with the reason "rolled back V, ... by who". A
// rollback whose restarts failed committed all the same, and holds too.
func (h *Node) RollbackAndHold(ctx context.Context, to, who string) (*RollbackReport, error) {
	if err := manifests.ValidReason("who rolls back", who); err != nil {
		return nil, err
	}
	return h.rollback(ctx, to, who)
}

// rollback is Rollback, holding the node afterwards when who is set.
func (h *Node) rollback(ctx context.Context, to, who string) (*RollbackReport, error) {
	progress, r, b := h.o.Progress, h.o.Restarter, h.b
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := b.Node()
	if err := refuseStaged(n, "rollback"); err != nil {
		return nil, err
	}
	steps := 1
	if to != "" {
		if steps, err = stepsTo(n, to); err != nil {
			return nil, err
		}
	}
	rep, err := rollbackLocked(ctx, b, r, steps, h.noteFor("rollback"), progress)
	if who == "" || rep == nil || len(rep.Steps) == 0 {
		return rep, err
	}
	var vs []string
	for _, s := range rep.Steps {
		vs = append(vs, s.Version)
	}
	reason := "rolled back " + strings.Join(vs, ", ") + " by " + who
	if len(reason) > manifests.MaxReasonLen {
		reason = fmt.Sprintf("rolled back %d overlays, %s down to %s, by %s", len(vs), vs[0], vs[len(vs)-1], who)
	}
	hold, herr := holdAt(n, reason)
	if herr != nil {
		return rep, errors.Join(err, fmt.Errorf("the rollback committed; holding the node there failed: %w", herr))
	}
	rep.Held = hold
	return rep, err
}

// stepsTo returns how many applied overlays are above version to.
func stepsTo(n nodestate.Node, to string) (int, error) {
	v, err := view.Load(n)
	if err != nil {
		return 0, err
	}
	if len(v.Applied) == 0 {
		return 0, fmt.Errorf("node %s is at its image %s: %w", n.Root, v.Head().Version, ErrNothingToRollback)
	}
	versions := []string{v.Ledger.Canonical().Head.Version}
	for _, e := range v.Applied {
		versions = append(versions, e.Version)
	}
	for i, ver := range versions {
		if ver != to {
			continue
		}
		if i == len(versions)-1 {
			return 0, fmt.Errorf("node %s is at %s already: %w", n.Root, to, ErrNothingToRollback)
		}
		return len(versions) - 1 - i, nil
	}
	return 0, fmt.Errorf("rollback --to %s: node %s can go back to %s (where its overlays start) or an overlay it applied (%s): %w",
		to, n.Root, versions[0], strings.Join(versions[1:len(versions)-1], ", "), ErrRollbackTarget)
}

func rollbackLocked(ctx context.Context, b nodestate.Backend, r Restarter, steps int, ln loadNote, progress func(string)) (*RollbackReport, error) {
	n := b.Node()
	rep := &RollbackReport{Root: n.Root, Steps: []manifests.Ref{}}
	var l *manifests.Ledger
	var cat manifests.Catalog
	var changed []string
	due := map[string]manifests.ServiceAction{}
	// Every step is checked before the first changes anything: a step
	// that cannot be taken back (its undo data gone or tampered with)
	// stops the rollback before it starts, not half way.
	if err := checkSteps(ctx, b, steps); err != nil {
		return nil, err
	}
	for i := 0; i < steps; i++ {
		st, err := rollbackStep(ctx, b, progress)
		if err != nil {
			if i > 0 {
				err = fmt.Errorf("rolled back to %s; then: %w (the restarts of the steps done are pending: strata restart-pending)", rep.Head.Version, err)
			}
			return nil, err
		}
		rep.Reverted, rep.Head = st.reverted, st.head
		rep.Steps = append(rep.Steps, st.reverted)
		// In step order, as the ledger settles debts: a unit a later
		// step brings back is restarted, not stopped.
		for _, a := range st.actions {
			due[a.Unit] = manifests.FollowAction(due[a.Unit], a)
		}
		changed = append(changed, st.changed...)
		l = st.ledger
	}
	rep.Actions = []manifests.ServiceAction{}
	for _, a := range due {
		rep.Actions = append(rep.Actions, a)
	}
	sort.Slice(rep.Actions, func(i, j int) bool { return rep.Actions[i].Unit < rep.Actions[j].Unit })
	// The restarts run against the catalog of the tree the node ends at.
	v, err := view.Load(n)
	if err != nil {
		return rep, err
	}
	cat = v.Catalog()
	if r == nil {
		return rep, nil
	}
	res, err := runPlan(ctx, r, RestartPlan{Actions: rep.Actions, Catalog: cat, Changed: changed}, ln, func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		rep.Restarted = append(rep.Restarted, a)
	})
	rep.Live = res
	if err != nil {
		var vs []string
		for _, s := range rep.Steps {
			vs = append(vs, s.Version)
		}
		err = fmt.Errorf("rolled back %s (committed: node %s is at %s), but %w; the restarts stay pending: strata restart-pending", strings.Join(vs, ", "), n.Root, rep.Head.Version, err)
		// The debt carries the error: status, history, health and the
		// fleet view show it until a restart that passes settles it.
		if rerr := recordFailedRestart(n, l, rep.Actions, err); rerr != nil {
			return rep, errors.Join(err, rerr)
		}
		return rep, err
	}
	return rep, recordRestarts(n, l, rep.Actions, rebootDue(res))
}

// checkSteps checks that the node's last steps applied overlays can each
// be taken back (nodestate.Backend.CheckRevert), newest first.
func checkSteps(ctx context.Context, b nodestate.Backend, steps int) error {
	v, err := view.Load(b.Node())
	if err != nil {
		return err
	}
	for i := 0; i < steps && i < len(v.Overlays); i++ {
		if err := b.CheckRevert(ctx, &nodestate.Change{Manifest: v.Overlays[len(v.Overlays)-1-i]}); err != nil {
			return err
		}
	}
	return nil
}

// rolledBack is one overlay undone: the plan its rollback calls for.
type rolledBack struct {
	reverted, head manifests.Ref
	actions        []manifests.ServiceAction
	changed        []string
	ledger         *manifests.Ledger
}

// rollbackStep reverts and records the node's last applied overlay,
// leaving its restarts pending.
func rollbackStep(ctx context.Context, b nodestate.Backend, progress func(string)) (*rolledBack, error) {
	n := b.Node()
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	if len(v.Applied) == 0 {
		return nil, fmt.Errorf("node %s is at its image %s: %w", n.Root, v.Head().Version, ErrNothingToRollback)
	}
	last := v.Applied[len(v.Applied)-1]
	m := v.Overlays[len(v.Overlays)-1]
	prev := v.Ledger.Canonical()
	if len(v.Applied) > 1 {
		prev = v.Applied[len(v.Applied)-2]
	}
	before, err := v.ExpectedAfter(len(v.Overlays) - 1)
	if err != nil {
		return nil, err
	}
	after, err := v.Expected()
	if err != nil {
		return nil, err
	}
	// Rolling back changes the tree from after the overlay to before it.
	plan := planFor(m, v.Catalog(), after, before)
	rec := manifests.LedgerEntry{
		Seq:        len(v.Ledger.Entries),
		Action:     manifests.LedgerRollback,
		Line:       last.Line,
		Version:    last.Version,
		Digest:     last.Digest,
		Image:      last.Image,
		Head:       prev.Head,
		TreeDigest: before.Digest(),
		Pending:    plan.Actions,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}
	t, err := b.StageRevert(ctx, &nodestate.Change{Manifest: m, Record: rec})
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("rolling back %s to %s", last.Version, prev.Head.Version))
	if err := t.Switch(ctx); err != nil {
		return nil, err
	}
	l, err := t.Commit(ctx, v.Ledger)
	if l == nil {
		return nil, errors.Join(err, t.Abort(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("rollback of %s committed, but finishing it failed (the next run retries): %w", last.Version, err)
	}
	if err := n.DropManifest(last.Version); err != nil {
		return nil, err
	}
	return &rolledBack{reverted: last.Head, head: prev.Head, actions: plan.Actions, changed: catalog.ChangedPaths(m, before), ledger: l}, nil
}
