package repo_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/repo/storetest"
)

func TestDirStore(t *testing.T) {
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
		return &storetest.Fixture{
			Store: repo.Dir(dir),
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
