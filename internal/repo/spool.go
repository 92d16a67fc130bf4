package repo

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// Spool is a Store over a remote one that fetches each member once: a
// read that reaches the end of a member leaves a copy in Dir, which later
// opens of the member read instead. Verifying an overlay reads it more
// than once (its SHA-256 against the index, its manifest, its payload);
// over HTTP each read would be a download. Only what callers read, within
// their own bounds, is ever written, and a member read only in part is
// not kept. Close removes the copies.
type Spool struct {
	Store Store
	Dir   string

	mu       sync.Mutex
	files    map[string]spooled
	inflight map[string]chan struct{} // members Prefetch is fetching, closed when done
	cancel   context.CancelFunc       // ends Prefetch's fetches
	fetches  sync.WaitGroup
}

type spooled struct {
	path string
	size int64
}

var _ Store = (*Spool)(nil)

// NewSpool returns a spool over s keeping its copies in a new directory
// below dir ("" for the system's temporary directory).
func NewSpool(s Store, dir string) (*Spool, error) {
	d, err := os.MkdirTemp(dir, "strata-spool-")
	if err != nil {
		return nil, fmt.Errorf("creating a spool: %w", err)
	}
	return &Spool{Store: s, Dir: d, files: map[string]spooled{}, inflight: map[string]chan struct{}{}}, nil
}

// Close ends the fetches Prefetch started and removes the spool's copies.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.fetches.Wait()
	return os.RemoveAll(s.Dir)
}

// Open opens member name, from the spool when a whole copy is there (or
// once Prefetch has finished fetching it).
func (s *Spool) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	c, ok := s.files[name]
	wait := s.inflight[name]
	s.mu.Unlock()
	if !ok && wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		s.mu.Lock()
		c, ok = s.files[name]
		s.mu.Unlock()
	}
	if ok {
		f, err := os.Open(c.path)
		if err != nil {
			return nil, 0, fmt.Errorf("opening the spooled copy of %s: %w", name, err)
		}
		return &member{ctx: ctx, f: f, left: -1}, c.size, nil
	}
	rc, size, err := s.Store.Open(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	tmp, err := os.CreateTemp(s.Dir, "member-")
	if err != nil {
		rc.Close()
		return nil, 0, fmt.Errorf("spooling %s: %w", name, err)
	}
	return &teeMember{rc: rc, tmp: tmp, size: size, keep: func(n int64) {
		s.mu.Lock()
		s.files[name] = spooled{path: tmp.Name(), size: n}
		s.mu.Unlock()
	}}, size, nil
}

// teeMember copies what is read into tmp and keeps the copy when the read
// reached the member's end.
type teeMember struct {
	rc   io.ReadCloser
	tmp  *os.File
	size int64
	n    int64
	err  error // a failed write: the copy is not kept
	done bool
	keep func(n int64)
}

func (t *teeMember) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 && t.err == nil {
		if _, werr := t.tmp.Write(p[:n]); werr != nil {
			t.err = werr
		}
		t.n += int64(n)
	}
	if err == io.EOF && t.err == nil && (t.size < 0 || t.n == t.size) {
		t.done = true
	}
	return n, err
}

func (t *teeMember) Close() error {
	err := t.rc.Close()
	cerr := t.tmp.Close()
	if t.done && cerr == nil {
		t.keep(t.n)
	} else {
		_ = os.Remove(t.tmp.Name())
	}
	return err
}

// Rereadable reports that a member read again comes from the spool's own
// copy.
func (s *Spool) Rereadable() bool { return true }

// Prefetcher is a store that can fetch members before they are read
// (Spool).
type Prefetcher interface {
	Store
	// Prefetch starts fetching members, read later in that order.
	Prefetch(ctx context.Context, members []Sized)
}

var _ Prefetcher = (*Spool)(nil)

// Sized is a member and the size its index records.
type Sized struct {
	Name string
	Size int64
}

// prefetchers is how many members Prefetch fetches at once.
const prefetchers = 4

// Prefetch starts fetching members into the spool, a few at a time and in
// order, and returns: the reads that follow find them there, or wait for
// the fetch under way, instead of each waiting for its own transfer in
// turn. A member is read to at most its size and kept only if it has
// exactly that size; whatever fails here is left for the reader's own
// Open to meet and report. Nothing is trusted because it was prefetched:
// readers check members as they always do. Close ends the fetches.
func (s *Spool) Prefetch(ctx context.Context, members []Sized) {
	s.mu.Lock()
	if s.cancel == nil {
		ctx, s.cancel = context.WithCancel(ctx)
	} else {
		s.mu.Unlock()
		return // one prefetch per spool
	}
	var queue []Sized
	for _, m := range members {
		if _, ok := s.files[m.Name]; ok || s.inflight[m.Name] != nil || m.Size < 0 {
			continue
		}
		s.inflight[m.Name] = make(chan struct{})
		queue = append(queue, m)
	}
	s.mu.Unlock()
	next := make(chan Sized)
	for range min(prefetchers, len(queue)) {
		s.fetches.Go(func() {
			for m := range next {
				s.fetch(ctx, m)
			}
		})
	}
	s.fetches.Go(func() {
		defer close(next)
		for i, m := range queue {
			select {
			case next <- m:
			case <-ctx.Done():
				s.mu.Lock()
				for _, left := range queue[i:] {
					close(s.inflight[left.Name])
					delete(s.inflight, left.Name)
				}
				s.mu.Unlock()
				return
			}
		}
	})
}

// fetch copies member m into the spool, keeping the copy only when it is
// whole, and ends m's wait.
func (s *Spool) fetch(ctx context.Context, m Sized) {
	kept := false
	var path string
	defer func() {
		s.mu.Lock()
		if kept {
			s.files[m.Name] = spooled{path: path, size: m.Size}
		} else if path != "" {
			_ = os.Remove(path)
		}
		close(s.inflight[m.Name])
		delete(s.inflight, m.Name)
		s.mu.Unlock()
	}()
	rc, size, err := s.Store.Open(ctx, m.Name)
	if err != nil {
		return
	}
	defer rc.Close()
	if size >= 0 && size != m.Size {
		return
	}
	tmp, err := os.CreateTemp(s.Dir, "member-")
	if err != nil {
		return
	}
	path = tmp.Name()
	n, err := io.Copy(tmp, io.LimitReader(rc, m.Size+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	kept = err == nil && n == m.Size
}
