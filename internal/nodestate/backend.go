package nodestate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

// Backend is the node side of apply and rollback: it owns how the node's
// tree changes and what a crash leaves behind. The engine (package node)
// keeps what is format and policy: opening and verifying
// overlays, the sequence, the expected trees, restart plans and which
// records the ledger gets. Backends register themselves by name
// (RegisterBackend); OpenBackend opens the one a node's state names.
type Backend interface {
	// Node returns the node whose tree the backend changes.
	Node() Node
	// Interrupted describes what a crash left unsettled ("" for nothing),
	// changing nothing.
	Interrupted() (string, error)
	// Recover settles what a crash left, so the tree is ledger l's head;
	// it returns the record of a change it took back after that change had
	// reached the tree (its services may have seen it).
	Recover(ctx context.Context, l *manifests.Ledger) (*manifests.LedgerEntry, error)
	// Check refuses an overlay the node's tree cannot take safely.
	Check(m *manifests.OverlayManifest) error
	// Stage prepares an overlay's change aside.
	Stage(ctx context.Context, ch *Change) (Txn, error)
	// StageRevert prepares taking back the last applied overlay.
	StageRevert(ctx context.Context, ch *Change) (Txn, error)
	// CheckRevert checks, changing nothing, that an applied overlay
	// (ch.Manifest) can be taken back.
	CheckRevert(ctx context.Context, ch *Change) error
	// Scan lists the node's current tree, without strata's state.
	Scan(ctx context.Context) ([]manifests.Entry, error)
}

// Activator is a backend that builds the node's mounts from its ledger
// (at boot, or offline on a mounted disk).
type Activator interface {
	Backend
	Activate(ctx context.Context) error
}

// LayerRebuilder is a backend that keeps each applied overlay as a layer
// of its own and can write one anew in place (restart --repair).
type LayerRebuilder interface {
	Backend
	// RebuildLayer writes the layer of the applied overlay ch.Manifest
	// anew.
	RebuildLayer(ctx context.Context, ch *Change) error
	// LayerHas reports whether version's layer holds tree path rel.
	LayerHas(version, rel string) bool
	// ImageDir is where the image's own tree stays reachable.
	ImageDir() string
	// CheckLayers checks each applied overlay's layer that has a record
	// of its own (a layer image's digest) against that record, changing
	// nothing, and lists those that differ.
	CheckLayers(ctx context.Context) ([]LayerProblem, error)
	// LayerIntegrity says how the layers are checked and names one that
	// activation refused.
	LayerIntegrity() (*schema.LayerIntegrity, error)
}

// Sealed is a backend whose managed hierarchies, while stacked, hold
// nothing a hand edit can change: read-only mounts of the image and of
// layer images (kernel-verified, or checked by digest when mounted). A
// file there differs from the head's only if an image's bytes changed
// below its mount, which the audit and activation name; it is never an
// edit an apply would lose. Another mount can still cover a file.
type Sealed interface {
	Backend
	// SealedMounts returns the ids (as mountinfo and statx give them) of
	// the mounts the managed hierarchies' files are on while the node is
	// sealed: its root and its stacks. It returns nil when the node is not
	// sealed now: stacks not active, a layer kept as a directory (writable
	// on the state partition), a refused layer, a stack with no layer
	// image of its own, or a root on a writable file system.
	SealedMounts() (map[uint64]bool, error)
}

// LayerProblem is a layer that is not what its apply wrote.
type LayerProblem struct {
	// Version is the overlay whose layer it is.
	Version string
	// Path is the layer's file, slash-separated and relative to the
	// node's root.
	Path string
	// Msg says how it differs.
	Msg string
}

// BackendOptions are what opening a backend may take.
type BackendOptions struct {
	// Run is the runtime directory (default ROOT/run): an initramfs
	// passes its own /run, which becomes the node's after the switch.
	Run string
	// Managed returns the managed hierarchies of the node's image; nil:
	// read from the image manifest in the node's tree.
	Managed func() ([]string, error)
}

// Opener opens the backend of node n.
type Opener func(n Node, o BackendOptions) (Backend, error)

var (
	backendsMu sync.RWMutex
	backends   = map[string]Opener{}
)

// RegisterBackend makes a backend known by the name a node's backend
// state file gives. Backends register when their package initialises; a
// program that opens nodes imports them (package nodestate/backends imports
// them all). Registering a name twice panics.
func RegisterBackend(name string, open Opener) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[name]; dup || open == nil {
		panic("node: backend " + name + " registered twice or with no opener")
	}
	backends[name] = open
}

// Backends lists the registered backends' names, sorted.
func Backends() []string {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	out := make([]string, 0, len(backends))
	for name := range backends {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// OpenBackend checks the node's state and opens the backend it names.
func OpenBackend(n Node, o BackendOptions) (Backend, error) {
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	name, err := n.Backend()
	if err != nil {
		return nil, err
	}
	backendsMu.RLock()
	open := backends[name]
	backendsMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("node %s: backend %s is not built into this program (it has: %s): %w", n.Root, name, strings.Join(Backends(), ", "), manifests.ErrInvalid)
	}
	return open(n, o)
}

// Hierarchies returns the managed hierarchies o names, else those of the
// image manifest in the node's tree.
func (o BackendOptions) Hierarchies(n Node) ([]string, error) {
	if o.Managed != nil {
		return o.Managed()
	}
	m, _, err := n.ImageManifest()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Root, err)
	}
	return m.Managed(), nil
}

// Canonical returns root as an absolute path without symlinks (mounts are
// found by path in the mount table, which shows such paths).
func Canonical(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("node %s: no such directory: %w", root, ErrNotNode)
	}
	if err != nil {
		return "", fmt.Errorf("node %s: %w", root, err)
	}
	return real, nil
}
