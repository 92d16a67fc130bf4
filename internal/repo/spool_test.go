package repo_test

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/repo"
)

// memStore serves members from memory, counting opens and the most
// held open at once; gate, if set, holds every read until it is closed,
// and opened, if set, is sent a value at every open.
type memStore struct {
	members map[string]string
	gate    chan struct{}
	opened  chan struct{}

	mu         sync.Mutex
	opens      map[string]int
	held, most int
}

func (c *memStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	data, ok := c.members[name]
	if !ok {
		return nil, 0, os.ErrNotExist
	}
	c.mu.Lock()
	c.opens[name]++
	c.held++
	c.most = max(c.most, c.held)
	c.mu.Unlock()
	if c.opened != nil {
		c.opened <- struct{}{}
	}
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			c.done()
			return nil, 0, ctx.Err()
		}
	}
	return &countedReader{Reader: strings.NewReader(data), c: c}, int64(len(data)), nil
}

func (c *memStore) done() {
	c.mu.Lock()
	c.held--
	c.mu.Unlock()
}

type countedReader struct {
	io.Reader
	c *memStore
}

func (r *countedReader) Close() error { r.c.done(); return nil }

func newMemStore(n int) (*memStore, []repo.Sized) {
	c := &memStore{members: map[string]string{}, opens: map[string]int{}}
	var want []repo.Sized
	for i := range n {
		name := "overlays/o" + strings.Repeat("x", i) + ".tar.zst"
		c.members[name] = strings.Repeat(string(rune('a'+i%26)), 1000+i)
		want = append(want, repo.Sized{Name: name, Size: int64(1000 + i)})
	}
	return c, want
}

// Prefetched members are fetched once, a few at a time, and read from the
// spool afterwards; a member whose size is not the one given is not kept
// and is fetched again by its reader.
func TestSpoolPrefetch(t *testing.T) {
	c, want := newMemStore(12)
	want[3].Size++ // the index says otherwise
	sp, err := repo.NewSpool(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	c.gate = make(chan struct{})
	c.opened = make(chan struct{}, 2*len(want))
	sp.Prefetch(t.Context(), want)
	// Hold every fetch until as many as Prefetch runs at once have
	// started (4): the gate opened any earlier would let the scheduler
	// decide how many overlap.
	for i := range 4 {
		select {
		case <-c.opened:
		case <-time.After(time.Minute): // not a timing bound: a guard against hanging
			t.Fatalf("Prefetch started %d fetches, want 4", i)
		}
	}
	close(c.gate)
	// The member the index misdescribes last: its prefetch failed, and
	// Open fetches it again, which would overlap prefetches still under
	// way (five at once) were it read in order.
	order := append(append(append([]repo.Sized(nil), want[:3]...), want[4:]...), want[3])
	for _, m := range order {
		rc, _, err := sp.Open(t.Context(), m.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != c.members[m.Name] {
			t.Fatalf("%s read back as %d bytes, %v", m.Name, len(b), err)
		}
	}
	for i, m := range want {
		if got, wantOpens := c.opens[m.Name], 1+min(1, max(0, 1-abs(i-3))); got != wantOpens {
			t.Errorf("%s fetched %d times, want %d", m.Name, got, wantOpens)
		}
	}
	if c.most != 4 {
		t.Errorf("%d fetches at once, want 4", c.most)
	}
}

func abs(n int) int { return max(n, -n) }

// Close ends fetches that are under way and waits for them: nothing is
// left running or on disk.
func TestSpoolPrefetchClose(t *testing.T) {
	c, want := newMemStore(8)
	c.gate = make(chan struct{}) // never opened: every fetch hangs
	dir := t.TempDir()
	sp, err := repo.NewSpool(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	sp.Prefetch(context.Background(), want)
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if c.held != 0 {
		t.Errorf("%d fetches still open after Close", c.held)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the spool's directory: %v", left)
	}
}
