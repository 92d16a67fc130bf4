package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// opKind is what one journal step does to one path.
type opKind string

const (
	// opReplace renames the staged object new/<i> onto the path, moving
	// what was there to old/<i>.
	opReplace opKind = "replace"
	// opMkdir creates a directory (moving a non-directory away first).
	opMkdir opKind = "mkdir"
	// opMeta changes the owner and mode of an existing directory.
	opMeta opKind = "meta"
	// opDelete moves the path (and all below it) to old/<i>.
	opDelete opKind = "delete"
)

// op is one step of a transaction.
type op struct {
	Kind  opKind          `json:"kind"`
	Path  string          `json:"path"`
	Entry manifests.Entry `json:"entry,omitempty"`
	// Existed records whether the path existed before the step, and Old
	// its entry (owner and mode are what opMeta restores).
	Existed bool            `json:"existed"`
	Old     manifests.Entry `json:"old,omitempty"`
}

// journal is a transaction's plan, written before any path changes.
type journal struct {
	// Record is the ledger record whose write commits the transaction.
	Record manifests.LedgerEntry `json:"record"`
	Ops    []op                  `json:"ops"`
}

// txn is a transaction directory: STATE/txn/ with journal.json, new/ (staged
// objects) and old/ (what the transaction displaced).
type txn struct {
	n   node.Node
	dir string
	j   journal
}

func txnDir(n node.Node) string { return filepath.Join(n.StateDir(), "txn") }

func (t *txn) newPath(i int) string { return filepath.Join(t.dir, "new", strconv.Itoa(i)) }
func (t *txn) oldPath(i int) string { return filepath.Join(t.dir, "old", strconv.Itoa(i)) }

// begin creates an empty transaction directory.
func begin(n node.Node) (*txn, error) {
	dir := txnDir(n)
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("node %s: an unfinished transaction exists at %s", n.Root, dir)
	}
	for _, d := range []string{"new", "old"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("starting transaction: %w", err)
		}
	}
	return &txn{n: n, dir: dir}, nil
}

// abort removes a transaction that changed nothing yet.
func (t *txn) abort() { _ = os.RemoveAll(t.dir) }

// writeJournal makes the plan durable; after it, recover() can undo.
func (t *txn) writeJournal() error {
	b, err := manifests.Encode(t.j)
	if err != nil {
		return err
	}
	return node.WriteFileAtomic(filepath.Join(t.dir, "journal.json"), b, 0o600)
}

// run carries out every op in order.
func (t *txn) run() error {
	for i, o := range t.j.Ops {
		if err := t.do(i, o); err != nil {
			return fmt.Errorf("applying %s: %w", o.Path, err)
		}
		_ = crashPoint("op-" + strconv.Itoa(i))
	}
	return nil
}

func (t *txn) do(i int, o op) error {
	target := t.n.Path(o.Path)
	switch o.Kind {
	case opReplace:
		if o.Existed {
			if err := rename(target, t.oldPath(i)); err != nil {
				return err
			}
		}
		return rename(t.newPath(i), target)
	case opMkdir:
		if o.Existed {
			if err := rename(target, t.oldPath(i)); err != nil {
				return err
			}
		}
		return tree.Create(target, o.Entry, nil)
	case opMeta:
		return tree.SetMeta(target, o.Entry)
	case opDelete:
		return rename(target, t.oldPath(i))
	}
	return fmt.Errorf("unknown journal op %q", o.Kind)
}

// undo reverts every op, newest first. It is idempotent, so it also
// finishes an undo that a crash interrupted.
func (t *txn) undo() error {
	var errs []error
	for i := len(t.j.Ops) - 1; i >= 0; i-- {
		o := t.j.Ops[i]
		target := t.n.Path(o.Path)
		old := t.oldPath(i)
		if o.Kind == opMeta {
			if err := tree.SetMeta(target, o.Old); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, err := os.Lstat(old); err == nil {
			if err := os.RemoveAll(target); err != nil {
				errs = append(errs, err)
			}
			if err := os.Rename(old, target); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if o.Existed {
			// The old object was never moved away: nothing happened here.
			continue
		}
		if o.Kind == opReplace {
			if _, err := os.Lstat(t.newPath(i)); err == nil {
				continue // never renamed in
			}
		}
		if err := os.RemoveAll(target); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// loadTxn reads an unfinished transaction, if any.
func loadTxn(n node.Node) (*txn, error) {
	dir := txnDir(n)
	b, err := os.ReadFile(filepath.Join(dir, "journal.json"))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(dir); serr == nil {
			// Staging began but no journal: nothing on the node changed.
			return &txn{n: n, dir: dir}, nil
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading journal: %w", err)
	}
	t := &txn{n: n, dir: dir}
	if err := manifests.Decode(b, &t.j); err != nil {
		return nil, fmt.Errorf("reading journal %s: %w", dir, err)
	}
	return t, nil
}
