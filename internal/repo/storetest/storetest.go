package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
)

// Fixture is a store under test and the means to place members in its
// backing storage behind its back. A placing function left nil, or
// returning errors.ErrUnsupported, skips the tests that need it (an HTTP
// server, say, has no FIFOs).
type Fixture struct {
	Store repo.Store
	// File places a regular file.
	File func(name string, data []byte) error
	// SymlinkOut places a symlink that points outside the repository, at
	// a readable file holding "outside".
	SymlinkOut func(name string) error
	// DirSymlinkOut makes directory dir a symlink to a directory outside
	// the repository that holds a file "x".
	DirSymlinkOut func(dir string) error
	// FIFO places a named pipe nobody writes to.
	FIFO func(name string) error
	// Device places a character device.
	Device func(name string) error
}

// Run runs the suite; newFixture returns a fresh, empty store.
func Run(t *testing.T, newFixture func(t *testing.T) *Fixture) {
	ctx := context.Background()
	t.Run("OpenExisting", func(t *testing.T) {
		f := newFixture(t)
		for name, data := range map[string][]byte{
			repo.IndexFile:                         []byte(`{"kind":"index"}`),
			"overlays/demo-1.0.1.overlay.tar.zst":  bytes.Repeat([]byte("payload "), 10000),
			"images/demo-1.0.0.image.json.minisig": {},
		} {
			file(t, f, name, data)
			rc, size, err := f.Store.Open(ctx, name)
			if err != nil {
				t.Fatalf("open %s: %v", name, err)
			}
			got, err := io.ReadAll(rc)
			if cerr := rc.Close(); err == nil {
				err = cerr
			}
			if err != nil || !bytes.Equal(got, data) || size != int64(len(data)) {
				t.Fatalf("open %s: %d bytes (size %d), %v; want %d bytes", name, len(got), size, err, len(data))
			}
		}
	})
	t.Run("Missing", func(t *testing.T) {
		f := newFixture(t)
		for _, name := range []string{"index.json", "overlays/none.overlay.tar"} {
			if _, _, err := f.Store.Open(ctx, name); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("open missing %s: %v, want fs.ErrNotExist", name, err)
			}
		}
	})
	t.Run("UnsafeNames", func(t *testing.T) {
		f := newFixture(t)
		file(t, f, "index.json", []byte("x"))
		for _, name := range []string{"", ".", "..", "../index.json", "overlays/../index.json", "/index.json", "./index.json", "overlays//x", "overlays/"} {
			if rc, _, err := f.Store.Open(ctx, name); !errors.Is(err, manifests.ErrUnsafePath) {
				if err == nil {
					rc.Close()
				}
				t.Errorf("open %q: %v, want manifests.ErrUnsafePath", name, err)
			}
		}
	})
	t.Run("SymlinkOut", func(t *testing.T) {
		f := newFixture(t)
		if !place(t, f.SymlinkOut, "overlays/evil.overlay.tar") {
			t.Skip("store has no symlinks")
		}
		refused(t, f.Store, "overlays/evil.overlay.tar")
	})
	t.Run("DirSymlinkOut", func(t *testing.T) {
		f := newFixture(t)
		if !place(t, f.DirSymlinkOut, "overlays") {
			t.Skip("store has no symlinks")
		}
		refused(t, f.Store, "overlays/x")
	})
	t.Run("FIFO", func(t *testing.T) {
		f := newFixture(t)
		if !place(t, f.FIFO, "overlays/pipe.overlay.tar") {
			t.Skip("store has no FIFOs")
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			refused(t, f.Store, "overlays/pipe.overlay.tar")
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("opening a FIFO member blocked")
		}
	})
	t.Run("Device", func(t *testing.T) {
		testenv.RequireRoot(t) // mknod
		f := newFixture(t)
		if !place(t, f.Device, "images/dev.squashfs") {
			t.Skip("store cannot hold a device here")
		}
		refused(t, f.Store, "images/dev.squashfs")
	})
	t.Run("Directory", func(t *testing.T) {
		f := newFixture(t)
		file(t, f, "overlays/x", []byte("x"))
		refused(t, f.Store, "overlays")
	})
	t.Run("Cancelled", func(t *testing.T) {
		f := newFixture(t)
		file(t, f, "index.json", bytes.Repeat([]byte("x"), 1<<20))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if rc, _, err := f.Store.Open(cctx, "index.json"); !errors.Is(err, context.Canceled) {
			if err == nil {
				rc.Close()
			}
			t.Errorf("open with a cancelled context: %v, want context.Canceled", err)
		}
		cctx, cancel = context.WithCancel(ctx)
		rc, _, err := f.Store.Open(cctx, "index.json")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		cancel()
		if _, err := io.ReadAll(rc); !errors.Is(err, context.Canceled) {
			t.Errorf("reading after cancel: %v, want context.Canceled", err)
		}
	})
	t.Run("Put", func(t *testing.T) {
		f := newFixture(t)
		p, ok := f.Store.(repo.Putter)
		if !ok {
			t.Skip("store is read-only")
		}
		for _, data := range []string{"first", "second, longer"} {
			if err := p.Put(ctx, "overlays/new.overlay.tar", bytes.NewReader([]byte(data))); err != nil {
				t.Fatal(err)
			}
			got, err := repo.ReadMember(ctx, f.Store, "overlays/new.overlay.tar", 1<<10)
			if err != nil || string(got) != data {
				t.Fatalf("after put: %q, %v; want %q", got, err, data)
			}
		}
		if err := p.Put(ctx, "../escape", bytes.NewReader(nil)); !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("put ../escape: %v, want manifests.ErrUnsafePath", err)
		}
		if _, err := repo.ReadMember(ctx, f.Store, "overlays/new.overlay.tar", 3); !errors.Is(err, manifests.ErrTooLarge) {
			t.Errorf("read over the limit: %v, want manifests.ErrTooLarge", err)
		}

		// Written as it is produced and hashed on the way.
		want := bytes.Repeat([]byte("strata "), 40<<10)
		sum, n, err := repo.PutWritten(ctx, p, "overlays/written.tar", func(w io.Writer) error {
			for i := 0; i < len(want); i += 4096 {
				if _, err := w.Write(want[i:min(i+4096, len(want))]); err != nil {
					return err
				}
			}
			return nil
		})
		wantSum := sha256.Sum256(want)
		if err != nil || n != int64(len(want)) || sum != hex.EncodeToString(wantSum[:]) {
			t.Fatalf("PutWritten: %s %d %v; want %x %d", sum, n, err, wantSum, len(want))
		}
		if got, err := repo.ReadMember(ctx, f.Store, "overlays/written.tar", 1<<20); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after PutWritten: %d bytes, %v", len(got), err)
		}
		// A writer that fails half way replaces nothing.
		boom := errors.New("boom")
		if _, _, err := repo.PutWritten(ctx, p, "overlays/written.tar", func(w io.Writer) error {
			if _, err := w.Write([]byte("half")); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Errorf("PutWritten with a failing writer: %v, want its error", err)
		}
		if got, err := repo.ReadMember(ctx, f.Store, "overlays/written.tar", 1<<20); err != nil || !bytes.Equal(got, want) {
			t.Errorf("a failed PutWritten changed the member: %d bytes, %v", len(got), err)
		}
		// Nor does one cancelled.
		cctx, cancel := context.WithCancel(ctx)
		if _, _, err := repo.PutWritten(cctx, p, "overlays/written.tar", func(w io.Writer) error {
			if _, err := w.Write([]byte("half")); err != nil {
				return err
			}
			cancel()
			for {
				if _, err := w.Write(want[:4096]); err != nil {
					return err
				}
			}
		}); !errors.Is(err, context.Canceled) {
			t.Errorf("PutWritten cancelled: %v, want context.Canceled", err)
		}
		if got, err := repo.ReadMember(ctx, f.Store, "overlays/written.tar", 1<<20); err != nil || !bytes.Equal(got, want) {
			t.Errorf("a cancelled PutWritten changed the member: %d bytes, %v", len(got), err)
		}

		for _, name := range []string{"overlays/written.tar", "overlays/new.overlay.tar"} {
			if ok, err := repo.Exists(ctx, f.Store, name); !ok || err != nil {
				t.Fatalf("Exists %s: %v %v, want true", name, ok, err)
			}
			if err := p.Remove(ctx, name); err != nil {
				t.Fatalf("remove %s: %v", name, err)
			}
			if ok, err := repo.Exists(ctx, f.Store, name); ok || err != nil {
				t.Errorf("Exists %s after remove: %v %v, want false", name, ok, err)
			}
			if err := p.Remove(ctx, name); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove %s twice: %v, want fs.ErrNotExist", name, err)
			}
		}
		if err := p.Remove(ctx, "../escape"); !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("remove ../escape: %v, want manifests.ErrUnsafePath", err)
		}
		// Something a store refuses to read is there all the same, and
		// stays.
		if err := p.Put(ctx, "overlays/sub/member", bytes.NewReader([]byte("x"))); err != nil {
			t.Fatal(err)
		}
		if ok, err := repo.Exists(ctx, f.Store, "overlays/sub"); !ok || err != nil {
			t.Errorf("Exists on a directory of members: %v %v, want true", ok, err)
		}
		if err := p.Remove(ctx, "overlays/sub"); !errors.Is(err, repo.ErrNotRegular) {
			t.Errorf("remove a directory of members: %v, want repo.ErrNotRegular", err)
		}
	})
}

// file places a regular file.
func file(t *testing.T, f *Fixture, name string, data []byte) {
	t.Helper()
	if err := f.File(name, data); err != nil {
		t.Fatalf("placing %s: %v", name, err)
	}
}

// place runs fn to place name, reporting false when the store cannot hold
// such a member.
func place(t *testing.T, fn func(string) error, name string) bool {
	t.Helper()
	if fn == nil {
		return false
	}
	if err := fn(name); errors.Is(err, errors.ErrUnsupported) {
		return false
	} else if err != nil {
		t.Fatalf("placing %s: %v", name, err)
	}
	return true
}

// refused checks that opening name fails as a rejection, never as a
// missing file and never with data.
func refused(t *testing.T, s repo.Store, name string) {
	t.Helper()
	rc, _, err := s.Open(context.Background(), name)
	if err == nil {
		rc.Close()
		t.Errorf("open %s succeeded; want it refused", name)
		return
	}
	if !errors.Is(err, manifests.ErrRejected) {
		t.Errorf("open %s: %v; want a rejection (manifests.ErrRejected)", name, err)
	}
}
