package overlay

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/manifests"
)

// crashAt names the crash point tests ask for. It is empty in the
// strata binary; the package's tests set it (export_test.go).
var crashAt = func() string { return "" }

// applyOne stages, journals and commits one overlay.
func applyOne(ctx context.Context, v *nodeView, a *Archive, plan *Plan) error {
	n := v.n
	m := a.Manifest
	if err := checkNodePaths(n, m); err != nil {
		return err
	}
	t, err := begin(n)
	if err != nil {
		return err
	}
	ops, index, err := planOps(n, m)
	if err != nil {
		t.abort()
		return err
	}
	err = a.Payload(ctx, func(e manifests.Entry, r io.Reader) error {
		i := index[e.Path]
		if ops[i].Kind != opReplace {
			return nil
		}
		// Content is checked by Payload at the member's end, with an error
		// that names the member; Create only writes it.
		e.SHA256 = ""
		return createEntry(t.newPath(i), e, r)
	})
	if err != nil {
		t.abort()
		return err
	}
	last := v.ledger.Last()
	t.j = journal{Ops: ops, Record: manifests.LedgerEntry{
		Seq:        len(v.ledger.Entries),
		Action:     manifests.LedgerApply,
		Line:       m.Line,
		Version:    m.Version,
		Digest:     a.Digest,
		Image:      last.Image,
		Head:       manifests.Ref{Version: m.Version, Digest: a.Digest},
		TreeDigest: m.TreeDigest,
		Pending:    plan.Actions,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}}
	store := filepath.Join(manifestStore(n), m.Version+".json")
	if err := node.WriteFileAtomic(store+".minisig", a.Sig, 0o644); err != nil {
		t.abort()
		return err
	}
	if err := node.WriteFileAtomic(store, a.Raw, 0o644); err != nil {
		t.abort()
		return err
	}
	return commit(t, v.ledger)
}

// commit writes the journal, runs the ops and appends the record to the
// ledger; any failure before the ledger write undoes the ops.
func commit(t *txn, l *manifests.Ledger) error {
	if err := t.writeJournal(); err != nil {
		t.abort()
		return err
	}
	if err := t.run(); err != nil {
		if uerr := t.undo(); uerr != nil {
			return fmt.Errorf("%w; undo failed, the next run will retry: %v", err, uerr)
		}
		t.abort()
		return err
	}
	// Everything the ops wrote must be on disk before the ledger says it
	// is: one syncfs flushes the staged files and the renames together.
	if err := node.SyncFS(t.n.Root); err != nil {
		if uerr := t.undo(); uerr == nil {
			t.abort()
		}
		return err
	}
	if err := crashPoint("before-ledger"); err != nil {
		return err
	}
	next := *l
	next.Entries = append([]manifests.LedgerEntry{}, l.Entries...)
	if err := next.Append(t.j.Record); err != nil {
		return err
	}
	if err := t.n.WriteLedger(&next); err != nil {
		// The rename inside WriteLedger is the commit point; a failure
		// after it (syncing the directory) still committed. Only undo
		// when the ledger on disk does not hold the record.
		if l2, rerr := t.n.ReadLedger(); rerr == nil && l2.Last().Hash == next.Last().Hash {
			return t.finish()
		}
		if uerr := t.undo(); uerr == nil {
			t.abort()
		}
		return err
	}
	if err := crashPoint("after-ledger"); err != nil {
		return err
	}
	return t.finish()
}

// crashPoint lets crash tests stop a run at a named point ("op-N" after
// journal op N, "before-ledger", "after-ledger"): the process exits at once
// with status 99, as a power loss would.
func crashPoint(name string) error {
	if at := crashAt(); at != "" && at == name {
		os.Exit(99)
	}
	return nil
}

// recordRestarts appends a restart record for actions carried out.
func recordRestarts(n node.Node, done []manifests.ServiceAction) error {
	if len(done) == 0 {
		return nil
	}
	l, err := n.ReadLedger()
	if err != nil {
		return err
	}
	last := l.Last()
	err = l.Append(manifests.LedgerEntry{
		Action: manifests.LedgerRestart, Line: last.Line, Version: last.Version, Digest: last.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Done: done,
		Time: time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		return err
	}
	return n.WriteLedger(l)
}
