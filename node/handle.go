package node

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
)

// Node is a node opened once: its backend, chosen by the name its state
// gives among the backends registered with package nodestate, and the
// settings every operation on it shares. The operations are its methods.
// Those that change the node take its lock for their own duration (waiting
// up to LockWait; the boot-time ones, Activate and SettleUpgrade, take it
// at once) and, but for SettleUpgrade, settle first whatever a crash
// left; the handle holds no lock between them, and each operation reads
// the node's state afresh, since other strata processes may act on the
// node while a handle is open.
type Node struct {
	root string
	b    nodestate.Backend
	o    Options
}

// Options are the settings of an open node.
type Options struct {
	// LockWait is how long an operation that changes the node waits for
	// another strata process to finish with it (zero: refuse at once).
	LockWait time.Duration
	// Progress receives one line per step; nil is silent.
	Progress func(string)
	// Restarter carries out restart plans; nil records them as pending
	// (the node's restart debt).
	Restarter Restarter
	// Offline marks a node that is not running (a disk mounted for a
	// --disk command): nothing of it runs, so services' validation
	// commands (the node's own programs) do not run on this host, and
	// restarts are recorded as pending whatever Restarter says.
	Offline bool
	// Observer tells what the node's service manager knows of its units
	// (nil: the Restarter, when it is one): what each unit loaded, and
	// whether a changed config validates (Status.Units).
	Observer Observer
	// Run is the runtime directory activation mounts below (default
	// ROOT/run): an initramfs passes its own /run.
	Run string
}

// Open opens the node at root: it checks the node's state directory
// and opens the backend that state names. It changes nothing.
func Open(root string, o Options) (*Node, error) {
	if o.Run != "" {
		run, err := filepath.Abs(o.Run)
		if err != nil {
			return nil, fmt.Errorf("node %s: runtime directory %s: %w", root, o.Run, err)
		}
		o.Run = run
	}
	n := nodestate.Node{Root: root}
	b, err := nodestate.OpenBackend(n, nodestate.BackendOptions{Run: o.Run, Managed: func() ([]string, error) { return managedOf(n) }})
	if err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Offline {
		o.Restarter = nil
	}
	return &Node{root: root, b: b, o: o}, nil
}

// Root returns the node's root as it was opened.
func (h *Node) Root() string { return h.root }

// Backend returns the name of the node's backend.
func (h *Node) Backend() (string, error) { return h.b.Node().Backend() }

// state returns the node's state directory accessor.
func (h *Node) state() nodestate.Node { return h.b.Node() }

// lock takes the node's lock and settles whatever a crash left, so the
// operation starts from a settled node (see lockBackend). The returned
// function releases the lock.
func (h *Node) lock(ctx context.Context) (func(), error) {
	return lockBackend(ctx, h.b, h.root, h.o.LockWait, h.o.Progress)
}

// lockNoting is lock with what recovery did told to note instead.
func (h *Node) lockNoting(ctx context.Context, note func(string)) (func(), error) {
	return lockBackend(ctx, h.b, h.root, h.o.LockWait, note)
}
