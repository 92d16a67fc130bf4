package repo_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/overlay"
)

// cancelStore cancels a context as it opens its at-th member (counting
// from 0 once armed).
type cancelStore struct {
	repo.Store
	armed  bool
	at, n  int
	cancel context.CancelFunc
}

func (s *cancelStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if s.armed {
		if s.n == s.at {
			s.cancel()
		}
		s.n++
	}
	return s.Store.Open(ctx, name)
}

// A bundle interrupted as it reads any member of the repository stops
// with the cancellation and leaves neither the bundle nor its temporary.
func TestWriteBundleInterrupted(t *testing.T) {
	ctx := context.Background()
	img, key, _ := image(t, "alpha")
	dir := filepath.Join(t.TempDir(), "repo")
	if _, err := repo.Init(context.Background(), dir, img, key); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.0.1", "1.0.2"} {
		src := filepath.Join(t.TempDir(), "y")
		if err := os.WriteFile(src, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := overlay.Create(ctx, dir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/y", Src: src}}}, overlay.CreateOptions{Version: v}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := 0
	for k := 0; ; k++ {
		st := &cancelStore{Store: repo.Dir(dir), at: k}
		r, err := repo.OpenStore(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		st.armed, st.cancel = true, cancel
		out := filepath.Join(t.TempDir(), "b.tar")
		n, err := repo.WriteBundle(cctx, r, "", "1.0.0", "", out)
		cancel()
		if k >= st.n {
			if err != nil || n != 2 {
				t.Fatalf("uninterrupted bundle: %d overlays, %v", n, err)
			}
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled at member %d: %v, want context.Canceled", k, err)
		}
		stopped++
		if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
			t.Errorf("cancelled at member %d: left %v", k, left)
		}
	}
	if stopped < 2 {
		t.Errorf("%d reads of the bundle stopped when cancelled, want one per overlay at least", stopped)
	}
}
