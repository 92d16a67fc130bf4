package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/manifests"
)

func newNode(t *testing.T) node.Node {
	t.Helper()
	n := node.Node{Root: t.TempDir()}
	l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
	if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerProvision, Line: "x", Version: "1.0.0", Digest: manifests.Digest([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if err := n.WriteLedger(l); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLockExcludesAndNamesHolder(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	unlock, err := n.Lock(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.Lock(ctx, 0)
	if !errors.Is(err, node.ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), n.Root) {
		t.Errorf("lock error %q should name the holder's pid and the node", err)
	}
	done := make(chan error)
	go func() {
		u, err := n.Lock(ctx, time.Minute)
		if err == nil {
			u()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("waiting lock: %v", err)
	}
}

func TestLockRefusesNonNode(t *testing.T) {
	root := t.TempDir()
	_, err := node.Node{Root: root}.Lock(context.Background(), 0)
	if !errors.Is(err, node.ErrNotNode) {
		t.Fatalf("lock on a plain directory: %v, want ErrNotNode", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("lock created %d entries in a non-node", len(ents))
	}
}

func TestReadLedgerDetectsTampering(t *testing.T) {
	n := newNode(t)
	p := n.Path(manifests.LedgerPath)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), `"1.0.0"`, `"1.0.1"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ReadLedger(); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("tampered ledger: %v, want ErrInvalid", err)
	}
	if _, err := (node.Node{Root: t.TempDir()}).ReadLedger(); !errors.Is(err, node.ErrNotNode) {
		t.Fatalf("missing ledger: %v, want ErrNotNode", err)
	}
}

func TestWriteFileAtomicLeavesNoTemporaries(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f")
	for _, content := range []string{"one", "two"} {
		if err := node.WriteFileAtomic(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("content %q, %v", b, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Errorf("%d entries left in the directory, want 1", len(ents))
	}
}
