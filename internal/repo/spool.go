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

	mu    sync.Mutex
	files map[string]spooled
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
	return &Spool{Store: s, Dir: d, files: map[string]spooled{}}, nil
}

// Close removes the spool's copies.
func (s *Spool) Close() error { return os.RemoveAll(s.Dir) }

// Open opens member name, from the spool when a whole copy is there.
func (s *Spool) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	c, ok := s.files[name]
	s.mu.Unlock()
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
