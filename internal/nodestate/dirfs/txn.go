package dirfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
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
	n   nodestate.Node
	dir string
	j   journal
	// switched is set once the ops ran.
	switched bool
	// after is the node's expected tree after the change (Stage's
	// Change.After; nil for a transaction loaded back after a crash).
	after tree.State
}

func txnDir(n nodestate.Node) string { return filepath.Join(n.StateDir(), "txn") }

// txnRel is the transaction directory relative to the node root.
const txnRel = manifests.StateDir + "/txn"

func newRel(i int) string { return txnRel + "/new/" + strconv.Itoa(i) }
func oldRel(i int) string { return txnRel + "/old/" + strconv.Itoa(i) }

func (t *txn) newPath(i int) string { return t.n.Path(newRel(i)) }

// begin creates an empty transaction directory.
func begin(n nodestate.Node) (*txn, error) {
	dir := txnDir(n)
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("node %s: an unfinished transaction exists at %s: %w", n.Root, dir, nodestate.ErrDrift)
	}
	for _, d := range []string{"new", "old"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("starting transaction: %w", err)
		}
	}
	if err := safefile.SyncDir(n.StateDir()); err != nil {
		return nil, err
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
	return safefile.WriteAtomic(filepath.Join(t.dir, "journal.json"), b, 0o600)
}

// run carries out every op in order. Every path is resolved beneath the
// node root without following symlinks: no op can reach outside it,
// whatever the node holds or a forged journal names.
func (t *txn) run() error {
	d, err := openDirs(t.n.Root)
	if err != nil {
		return fmt.Errorf("opening node root: %w", err)
	}
	defer d.close()
	for i, o := range t.j.Ops {
		if err := t.do(d, i, o); err != nil {
			return fmt.Errorf("applying %s: %w", o.Path, err)
		}
		fault.Point("op-" + strconv.Itoa(i))
	}
	return nil
}

func (t *txn) do(d *dirs, i int, o op) error {
	switch o.Kind {
	case opReplace:
		if o.Existed {
			if err := d.rename(o.Path, oldRel(i)); err != nil {
				return err
			}
			// Between the two renames the path is missing: a crash here
			// is the one inside an op that recovery must also handle.
			fault.Point("op-" + strconv.Itoa(i) + "-half")
		}
		return d.rename(newRel(i), o.Path)
	case opMkdir:
		if o.Existed {
			if err := d.rename(o.Path, oldRel(i)); err != nil {
				return err
			}
		}
		return d.mkdir(o.Path, o.Entry)
	case opMeta:
		return d.setMeta(o.Path, o.Entry)
	case opDelete:
		return d.rename(o.Path, oldRel(i))
	}
	return fmt.Errorf("unknown journal op %q", o.Kind)
}

// setMeta sets owner and mode of rel inside root (owner only for
// symlinks).
func setMeta(root *os.Root, rel string, e manifests.Entry) error {
	if err := root.Lchown(rel, e.UID, e.GID); err != nil {
		return err
	}
	if e.Type == manifests.TypeSymlink {
		return nil
	}
	return root.Chmod(rel, tree.FileMode(e.Mode))
}

// undo reverts every op, newest first. It is idempotent, so it also
// finishes an undo that a crash interrupted. The reverted tree is synced
// before undo returns, so the journal may then be removed.
func (t *txn) undo() error {
	root, err := os.OpenRoot(t.n.Root)
	if err != nil {
		return fmt.Errorf("opening node root: %w", err)
	}
	defer root.Close()
	var errs []error
	for i := len(t.j.Ops) - 1; i >= 0; i-- {
		o := t.j.Ops[i]
		if o.Kind == opMeta {
			if err := setMeta(root, o.Path, o.Old); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, err := root.Lstat(oldRel(i)); err == nil {
			if err := root.RemoveAll(o.Path); err != nil {
				errs = append(errs, err)
			}
			if err := root.Rename(oldRel(i), o.Path); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if o.Existed {
			// The old object was never moved away: nothing happened here.
			continue
		}
		if o.Kind == opReplace {
			if _, err := root.Lstat(newRel(i)); err == nil {
				continue // never renamed in
			}
		}
		if err := root.RemoveAll(o.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return safefile.SyncFS(t.n.Root)
}

// validate refuses a journal whose ops name unsafe paths or node state:
// journals live in the node and could have been forged.
func (j *journal) validate() error {
	for _, o := range j.Ops {
		if err := manifests.ValidPath(o.Path); err != nil {
			return fmt.Errorf("journal op %s: %w", o.Kind, err)
		}
		if manifests.IsNodeState(o.Path) || manifests.IsProtected(o.Path) && o.Kind != opMeta && o.Kind != opMkdir {
			return fmt.Errorf("journal op %s %s: %w: strata's own paths", o.Kind, o.Path, manifests.ErrUnsafePath)
		}
		switch o.Kind {
		case opReplace, opMkdir, opMeta, opDelete:
		default:
			return fmt.Errorf("journal op %q on %s: %w", o.Kind, o.Path, manifests.ErrInvalid)
		}
	}
	return nil
}

// loadTxn reads an unfinished transaction, if any.
func loadTxn(n nodestate.Node) (*txn, error) {
	dir := txnDir(n)
	b, err := safefile.Read(filepath.Join(dir, "journal.json"), manifests.MaxManifestSize)
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
	if err := t.j.validate(); err != nil {
		return nil, fmt.Errorf("reading journal %s: %w", dir, err)
	}
	return t, nil
}
