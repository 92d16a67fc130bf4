package nodestate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

func newNode(t *testing.T) nodestate.Node {
	t.Helper()
	n := nodestate.Node{Root: t.TempDir()}
	l := &manifests.Ledger{Schema: manifests.Schema, Kind: manifests.KindLedger}
	img := manifests.Ref{Version: "1.0.0", Digest: manifests.Digest([]byte("x"))}
	if err := l.Append(manifests.LedgerEntry{Action: manifests.LedgerProvision, Line: "x", Version: img.Version, Digest: img.Digest, Image: img.Version, Head: img, TreeDigest: manifests.Digest([]byte("t"))}); err != nil {
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
	if !errors.Is(err, nodestate.ErrLocked) {
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
	_, err := nodestate.Node{Root: root}.Lock(context.Background(), 0)
	if !errors.Is(err, nodestate.ErrNotNode) {
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
	if _, err := newNode(t).ReadLedger(); err != nil {
		t.Fatalf("untouched ledger: %v", err)
	}
	if _, err := n.ReadLedger(); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("tampered ledger: %v, want ErrInvalid", err)
	}
	if _, err := (nodestate.Node{Root: t.TempDir()}).ReadLedger(); !errors.Is(err, nodestate.ErrNotNode) {
		t.Fatalf("missing ledger: %v, want ErrNotNode", err)
	}
}

// State planted as something else (a symlink out of the root, a FIFO
// where the ledger goes, a file where a directory goes) is refused before
// anything reads or writes through it, and the refusal names the path.
func TestCheckStateRefusesPlantedState(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	for _, v := range []string{victim, victim + "2"} {
		if err := os.WriteFile(v, []byte("keep me\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(p string) error
		want  string
	}{
		{"overlays", func(p string) error { return os.Symlink(outside, p) }, "overlays is not a directory (symlink)"},
		{"undo", func(p string) error { return os.Symlink(outside, p) }, "undo is not a directory (symlink)"},
		{"txn", func(p string) error { return os.WriteFile(p, nil, 0o644) }, "txn is not a directory (regular file)"},
		{"layers", func(p string) error { return os.Symlink(outside, p) }, "layers is not a directory (symlink)"},
		{"restarting", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "restarting is not a regular file (FIFO)"},
		{"backend", func(p string) error { return os.Symlink("/dev/zero", p) }, "backend is not a regular file (symlink)"},
		{"lock", func(p string) error { return os.Mkdir(p, 0o755) }, "lock is not a regular file (directory)"},
		{"lock", func(p string) error { return os.Link(filepath.Join(outside, "victim"), p) }, "lock has 2 hard links"},
		{"ledger.json", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Link(filepath.Join(outside, "victim2"), p)
		}, "ledger.json has 2 hard links"},
	} {
		n := newNode(t)
		if err := tc.plant(filepath.Join(n.StateDir(), tc.name)); err != nil {
			t.Fatal(err)
		}
		for op, err := range map[string]error{"CheckState": n.CheckState(), "ReadLedger": func() error { _, err := n.ReadLedger(); return err }()} {
			if !errors.Is(err, nodestate.ErrBadState) || !errors.Is(err, manifests.ErrRejected) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s with a planted %s: %v, want ErrBadState naming %q", op, tc.name, err, tc.want)
			}
		}
		if _, err := n.Lock(context.Background(), 0); !errors.Is(err, nodestate.ErrBadState) {
			t.Errorf("Lock with a planted %s: %v, want ErrBadState", tc.name, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 2 {
		t.Errorf("something was written through a planted link: %v", ents)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("the file outside the node = %q, %v: written through a hard link", b, err)
	}
	// FileLock on its own (the disk lock uses it too) refuses a hard
	// link and leaves the target alone.
	hl := filepath.Join(t.TempDir(), "lock")
	if err := os.Link(victim, hl); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.Lock(context.Background(), hl, 0); !errors.Is(err, nodestate.ErrBadLock) || !strings.Contains(err.Error(), "links, not a regular file of its own") {
		t.Errorf("FileLock on a hard link: %v, want ErrBadLock", err)
	}
	// A symlink or a FIFO: named, and a rejection (exit 3) alike.
	sl := filepath.Join(t.TempDir(), "lock")
	if err := os.Symlink(victim, sl); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.Lock(context.Background(), sl, 0); !errors.Is(err, nodestate.ErrBadLock) || !errors.Is(err, manifests.ErrRejected) || !strings.Contains(err.Error(), "it is a symlink") {
		t.Errorf("FileLock on a symlink: %v, want ErrBadLock", err)
	}
	fl := filepath.Join(t.TempDir(), "lock")
	if err := syscall.Mkfifo(fl, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.Lock(context.Background(), fl, 0); !errors.Is(err, nodestate.ErrBadLock) || !strings.Contains(err.Error(), "it is a FIFO") {
		t.Errorf("FileLock on a FIFO: %v, want ErrBadLock", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("FileLock truncated the file a hard link led to: %q", b)
	}
	// The ledger itself as a FIFO: refused at once, not a blocked open.
	n := newNode(t)
	p := n.Path(manifests.LedgerPath)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ReadLedger(); !errors.Is(err, nodestate.ErrBadState) {
		t.Errorf("ReadLedger of a FIFO: %v, want ErrBadState", err)
	}
}

func TestWriteFileAtomicLeavesNoTemporaries(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f")
	for _, content := range []string{"one", "two"} {
		if err := safefile.WriteAtomic(p, []byte(content), 0o640); err != nil {
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
