package nodestate_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
)

// testBackend is a backend of the test's own, registered by name.
type testBackend struct {
	nodestate.Backend
	n    nodestate.Node
	opts nodestate.BackendOptions
}

func (b *testBackend) Node() nodestate.Node { return b.n }

func init() {
	nodestate.RegisterBackend("test-backend", func(n nodestate.Node, o nodestate.BackendOptions) (nodestate.Backend, error) {
		return &testBackend{n: n, opts: o}, nil
	})
}

func TestOpenBackendByName(t *testing.T) {
	n := newNode(t)
	setBackend := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(n.StateDir(), "backend"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	setBackend("test-backend")
	b, err := nodestate.OpenBackend(n, nodestate.BackendOptions{Run: "/run/x"})
	if err != nil {
		t.Fatal(err)
	}
	if tb, ok := b.(*testBackend); !ok || tb.n.Root != n.Root || tb.opts.Run != "/run/x" {
		t.Fatalf("opened %#v, want the registered backend with the node and options", b)
	}

	// A name no backend registered (this test links none of strata's):
	// the error names it and what the program has.
	setBackend("zfs")
	if _, err := nodestate.OpenBackend(n, nodestate.BackendOptions{}); !errors.Is(err, manifests.ErrInvalid) || !strings.Contains(err.Error(), "zfs") || !strings.Contains(err.Error(), "test-backend") {
		t.Errorf("unregistered backend: %v, want an error naming it and the registered ones", err)
	}
	// Not a name at all.
	setBackend("../../etc")
	if _, err := nodestate.OpenBackend(n, nodestate.BackendOptions{}); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("backend file with a path: %v, want ErrInvalid", err)
	}
	// No backend file: the default, dir.
	if err := os.Remove(filepath.Join(n.StateDir(), "backend")); err != nil {
		t.Fatal(err)
	}
	if name, err := n.Backend(); err != nil || name != nodestate.BackendDir {
		t.Errorf("no backend file: %q, %v; want %q", name, err, nodestate.BackendDir)
	}
}

func TestRegisterBackendTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering test-backend again did not panic")
		}
	}()
	nodestate.RegisterBackend("test-backend", func(nodestate.Node, nodestate.BackendOptions) (nodestate.Backend, error) { return nil, nil })
}
