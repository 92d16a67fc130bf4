package repo_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/repo/storetest"
)

func TestDirStore(t *testing.T) {
	t.Run("per-call", func(t *testing.T) { testDirStore(t, 0) })
	// A server's store: its directory held open (KeepOpen).
	t.Run("kept-open", func(t *testing.T) { testDirStore(t, time.Hour) })
}

func testDirStore(t *testing.T, keep time.Duration) {
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		dir := filepath.Join(t.TempDir(), "repo")
		outside := t.TempDir()
		if err := os.WriteFile(filepath.Join(outside, "x"), []byte("outside"), 0o644); err != nil {
			t.Fatal(err)
		}
		host := func(name string) string {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}
		st := repo.Dir(dir)
		st.KeepOpen(keep)
		return &storetest.Fixture{
			Store: st,
			File: func(name string, data []byte) error {
				return os.WriteFile(host(name), data, 0o644)
			},
			SymlinkOut: func(name string) error {
				return os.Symlink(filepath.Join(outside, "x"), host(name))
			},
			DirSymlinkOut: func(name string) error {
				return os.Symlink(outside, host(name))
			},
			FIFO: func(name string) error {
				return unix.Mkfifo(host(name), 0o644)
			},
			Device: func(name string) error {
				if os.Geteuid() != 0 {
					return errors.ErrUnsupported
				}
				return unix.Mknod(host(name), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3)))
			},
		}
	})
}

// A store whose members are local files is read again as it is; any other
// store is read through a spool (no concrete store type is named).
func TestForRereads(t *testing.T) {
	dir := &repo.DirStore{Dir: t.TempDir()}
	st, done, err := repo.ForRereads(dir)
	if err != nil || st != repo.Store(dir) {
		t.Fatalf("a directory store: %v, %v; want it as it is", st, err)
	}
	done()
	remote := struct{ repo.Store }{dir} // not Rereadable
	st, done, err = repo.ForRereads(remote)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	sp, ok := st.(*repo.Spool)
	if !ok {
		t.Fatalf("a store that is not Rereadable: %T, want a spool", st)
	}
	if again, release, _ := repo.ForRereads(sp); again != repo.Store(sp) {
		t.Errorf("a spool was spooled again")
	} else {
		release()
	}
}

// A directory held open (KeepOpen) is opened again once it is older than
// asked: a repository directory moved into the store's place is served.
func TestKeepOpenFollowsSwappedDirectory(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "repo")
	for name, data := range map[string]string{"repo": "old", "new": "new!"} {
		if err := os.Mkdir(filepath.Join(top, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, name, "index.json"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := repo.Dir(dir)
	st.KeepOpen(20 * time.Millisecond)
	size := func() int64 {
		t.Helper()
		n, _, err := st.StatFile(t.Context(), "index.json")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := size(); n != 3 {
		t.Fatalf("size %d, want 3", n)
	}
	if err := os.Rename(dir, filepath.Join(top, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(top, "new"), dir); err != nil {
		t.Fatal(err)
	}
	// Not a time bound: the wait only ends a test that would hang.
	for deadline := time.Now().Add(time.Minute); size() != 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the directory moved into place was never served")
		}
	}
}

// Calls racing the replacement of the held directory never see it closed
// under them (go test -race; every call here replaces it).
func TestKeepOpenConcurrent(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m"), []byte("member"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := repo.Dir(dir)
	st.KeepOpen(time.Nanosecond)
	errc := make(chan error, 8)
	for range 8 {
		go func() {
			for range 500 {
				if _, _, err := st.StatFile(t.Context(), "m"); err != nil {
					errc <- err
					return
				}
				f, _, err := st.OpenFile(t.Context(), "m")
				if err != nil {
					errc <- err
					return
				}
				f.Close()
			}
			errc <- nil
		}()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
