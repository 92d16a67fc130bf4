package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/manifests"
)

// testBackend is a backend of the test's own, registered by name.
type testBackend struct {
	node.Backend
	n    node.Node
	opts node.BackendOptions
}

func (b *testBackend) Node() node.Node { return b.n }

func init() {
	node.RegisterBackend("test-backend", func(n node.Node, o node.BackendOptions) (node.Backend, error) {
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
	b, err := node.OpenBackend(n, node.BackendOptions{Run: "/run/x"})
	if err != nil {
		t.Fatal(err)
	}
	if tb, ok := b.(*testBackend); !ok || tb.n.Root != n.Root || tb.opts.Run != "/run/x" {
		t.Fatalf("opened %#v, want the registered backend with the node and options", b)
	}

	// A name no backend registered (this test links none of strata's):
	// the error names it and what the program has.
	setBackend("zfs")
	if _, err := node.OpenBackend(n, node.BackendOptions{}); err == nil || !strings.Contains(err.Error(), "zfs") || !strings.Contains(err.Error(), "test-backend") {
		t.Errorf("unregistered backend: %v, want an error naming it and the registered ones", err)
	}
	// Not a name at all.
	setBackend("../../etc")
	if _, err := node.OpenBackend(n, node.BackendOptions{}); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("backend file with a path: %v, want ErrInvalid", err)
	}
	// No backend file: the default, dir.
	if err := os.Remove(filepath.Join(n.StateDir(), "backend")); err != nil {
		t.Fatal(err)
	}
	if name, err := n.Backend(); err != nil || name != node.BackendDir {
		t.Errorf("no backend file: %q, %v; want %q", name, err, node.BackendDir)
	}
}

func TestRegisterBackendTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering test-backend again did not panic")
		}
	}()
	node.RegisterBackend("test-backend", func(node.Node, node.BackendOptions) (node.Backend, error) { return nil, nil })
}
