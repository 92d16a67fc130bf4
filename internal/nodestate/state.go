package nodestate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Errors about a node's tree, shared by every backend.
var (
	// ErrDrift reports a node whose tree or ledger differs from what it
	// should be.
	ErrDrift = manifests.Rejection("node drifted")
	// ErrSymlinkPath reports a write through a symlinked directory.
	ErrSymlinkPath = manifests.Rejection("path passes through a symlink")
)

// ManifestStore is the directory that keeps the signed manifests of the
// overlays in effect (VERSION.json and VERSION.json.minisig).
func (n Node) ManifestStore() string { return filepath.Join(n.StateDir(), "overlays") }

// StoreManifest keeps an overlay's signed manifest with the node state, so
// audits can check the node's history without the repository.
func (n Node) StoreManifest(version string, raw, sig []byte) error {
	store := filepath.Join(n.ManifestStore(), version+".json")
	if err := safefile.WriteAtomic(store+".minisig", sig, 0o644); err != nil {
		return err
	}
	return safefile.WriteAtomic(store, raw, 0o644)
}

// DropManifest removes a stored manifest (after its overlay was rolled
// back).
func (n Node) DropManifest(version string) error {
	for _, suffix := range []string{".json", ".json.minisig"} {
		p := filepath.Join(n.ManifestStore(), version+suffix)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("dropping manifest: %w", err)
		}
	}
	return nil
}

// PruneManifests removes from the manifest store everything that is not
// the signed manifest (or its signature) of one of the versions in keep:
// what a failed or interrupted apply stored, and temporary files a crash
// left.
func (n Node) PruneManifests(keep []string) error {
	ents, err := os.ReadDir(n.ManifestStore())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pruning stored manifests: %w", err)
	}
	want := map[string]bool{}
	for _, v := range keep {
		want[v+".json"], want[v+".json.minisig"] = true, true
	}
	for _, e := range ents {
		if want[e.Name()] && e.Type().IsRegular() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(n.ManifestStore(), e.Name())); err != nil {
			return fmt.Errorf("pruning stored manifests: %w", err)
		}
	}
	return nil
}

// Commit appends rec to the ledger l read before and writes it: the one
// place a ledger grows. The rename inside is the commit point; when a
// later step fails (syncing the directory) the ledger on disk is read back,
// and a ledger that holds rec counts as committed. It returns the new
// ledger, or an error if rec is not on disk.
func (n Node) Commit(l *manifests.Ledger, rec manifests.LedgerEntry) (*manifests.Ledger, error) {
	next := &manifests.Ledger{Schema: l.Schema, Kind: l.Kind, Entries: append([]manifests.LedgerEntry{}, l.Entries...)}
	if err := next.Append(rec); err != nil {
		return nil, err
	}
	if err := next.Last().Validate(); err != nil {
		return nil, err
	}
	if err := n.WriteLedger(next); err != nil {
		if l2, rerr := n.ReadLedger(); rerr == nil && l2.Last().Hash == next.Last().Hash {
			return next, nil
		}
		return nil, err
	}
	return next, nil
}

// Change is one overlay's effect on a node, verified by the caller:
// the engine checks signatures, sequence and the expected trees; a
// backend only carries the change out.
type Change struct {
	Manifest *manifests.OverlayManifest
	// Payload streams the payload members in manifest order, each checked
	// against its entry by the time fn returns for the next one (and the
	// last at the end); fn sees every entry.
	Payload func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error
	// Record is the ledger record whose write commits the change.
	Record manifests.LedgerEntry
	// Before and After are the node's expected trees before and after
	// the change (owners and modes of parent directories come from them).
	Before, After tree.State
}

// Txn is a change a backend staged: nothing on the node's tree is visible
// until Switch, and nothing is recorded until Commit.
type Txn interface {
	// Switch makes the change visible on the node's tree.
	Switch(ctx context.Context) error
	// Commit appends the change's record to the ledger l (the commit
	// point) and returns the new ledger. A nil ledger means nothing was
	// committed (Abort then takes the change back); a ledger with an
	// error means the change committed and only the cleanup after it
	// failed, which the next Recover finishes.
	Commit(ctx context.Context, l *manifests.Ledger) (*manifests.Ledger, error)
	// Abort takes back a change that did not commit, switched or not; it
	// refuses one whose record the ledger holds.
	Abort(ctx context.Context) error
}

// restartingFile marks that the services of a switched, not yet committed
// change are being restarted: if strata dies there, the services may run
// what the next run takes back, so they must be restarted again.
func (n Node) restartingFile() string { return filepath.Join(n.StateDir(), "restarting") }

// MarkRestarting records durably that the restarts of version begin.
func (n Node) MarkRestarting(version string) error {
	return safefile.WriteAtomic(n.restartingFile(), []byte(version+"\n"), 0o600)
}

// ClearRestarting removes the mark MarkRestarting left.
func (n Node) ClearRestarting() error {
	if err := os.Remove(n.restartingFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clearing restart mark: %w", err)
	}
	return nil
}

// Restarting returns the version whose restarts a crash interrupted, or "".
func (n Node) Restarting() (string, error) {
	b, err := safefile.Read(n.restartingFile(), 256)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (n Node) indexSerialFile() string { return filepath.Join(n.StateDir(), "index-serial") }

// IndexSerial returns the highest serial of a repository index the node
// accepted (0: none yet).
func (n Node) IndexSerial() (uint64, error) {
	b, err := safefile.Read(n.indexSerialFile(), 64)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", n.Root, err)
	}
	s, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("node %s: %s holds %q, not a serial: %w", n.Root, n.indexSerialFile(), b, ErrBadState)
	}
	return s, nil
}

// RecordIndexSerial keeps serial as the highest the node accepted, unless
// a higher one is recorded already.
func (n Node) RecordIndexSerial(serial uint64) error {
	cur, err := n.IndexSerial()
	if err != nil || serial <= cur {
		return err
	}
	return safefile.WriteAtomic(n.indexSerialFile(), []byte(strconv.FormatUint(serial, 10)+"\n"), 0o644)
}

// The backends strata has: what a node's backend file says.
const (
	// BackendDir changes the node's tree in place (the default).
	BackendDir = "dir"
	// BackendOverlayfs keeps the managed hierarchies as overlayfs
	// stacks over a read-only image.
	BackendOverlayfs = "overlayfs"
)

func (n Node) backendFile() string { return filepath.Join(n.StateDir(), "backend") }

// Backend returns the name of the node's backend: BackendDir unless its
// state names another (a name of lower-case letters, digits and dashes;
// OpenBackend refuses one no backend registered).
func (n Node) Backend() (string, error) {
	b, err := safefile.Read(n.backendFile(), 64)
	if errors.Is(err, os.ErrNotExist) {
		return BackendDir, nil
	}
	if err != nil {
		return "", fmt.Errorf("node %s: %w", n.Root, err)
	}
	name := strings.TrimSpace(string(b))
	if !backendName(name) {
		return "", fmt.Errorf("node %s: unknown backend %q in %s: %w", n.Root, name, n.backendFile(), manifests.ErrInvalid)
	}
	return name, nil
}

// SetBackend records the node's backend (at provisioning).
func (n Node) SetBackend(name string) error {
	return safefile.WriteAtomic(n.backendFile(), []byte(name+"\n"), 0o644)
}

// Holds reports whether the ledger's last record is r (same seq, action,
// version and digest): whether the change r records committed.
func (n Node) Holds(r manifests.LedgerEntry) (bool, error) {
	l, err := n.ReadLedger()
	if err != nil {
		return false, err
	}
	last := l.Last()
	return last.Seq == r.Seq && last.Action == r.Action && last.Version == r.Version && last.Digest == r.Digest, nil
}

// ErrCommitted reports an attempt to take back a change the ledger holds.
var ErrCommitted = errors.New("the change is committed; it can only be rolled back")

// backendName reports whether name can name a backend: 1 to 32 lower-case
// letters, digits and dashes.
func backendName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
