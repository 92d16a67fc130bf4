package repo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"

	"github.com/strata-dev/strata/manifests"
)

// MemStore is a repository held in memory: a store for tests of the
// engine and the publisher that need no disk, and for tools that build a
// repository before writing it anywhere. It is safe for concurrent use.
type MemStore struct {
	mu      sync.RWMutex
	members map[string][]byte
}

var (
	_ Putter     = (*MemStore)(nil)
	_ Rereadable = (*MemStore)(nil)
)

// Mem returns an empty in-memory store.
func Mem() *MemStore { return &MemStore{members: map[string][]byte{}} }

// String names the store.
func (m *MemStore) String() string { return "memory" }

// Open opens member name; see Store.
func (m *MemStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: "memory:" + name, Err: err}
	}
	if !fs.ValidPath(name) || name == "." {
		return nil, 0, &fs.PathError{Op: "open", Path: "memory:" + name, Err: manifests.ErrUnsafePath}
	}
	m.mu.RLock()
	data, ok := m.members[name]
	dir := !ok && hasMemberBelow(m.members, name)
	m.mu.RUnlock()
	switch {
	case dir:
		return nil, 0, &fs.PathError{Op: "open", Path: "memory:" + name, Err: fmt.Errorf("a directory: %w", ErrNotRegular)}
	case !ok:
		return nil, 0, &fs.PathError{Op: "open", Path: "memory:" + name, Err: fs.ErrNotExist}
	}
	// Members are never changed in place (Put replaces the slice), so
	// a reader keeps the content it opened.
	return io.NopCloser(&member{ctx: ctx, f: bytes.NewReader(data), left: int64(len(data))}), int64(len(data)), nil
}

// Put stores the content of r as member name, replacing it atomically:
// a reader sees the old member or the new one.
func (m *MemStore) Put(ctx context.Context, name string, r io.Reader) error {
	if !fs.ValidPath(name) || name == "." {
		return &fs.PathError{Op: "put", Path: "memory:" + name, Err: manifests.ErrUnsafePath}
	}
	data, err := io.ReadAll(&member{ctx: ctx, f: r, left: -1})
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// As in a directory: a member cannot also be a directory of others.
	if hasMemberBelow(m.members, name) {
		return &fs.PathError{Op: "put", Path: "memory:" + name, Err: fmt.Errorf("a directory: %w", ErrNotRegular)}
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if _, ok := m.members[dir]; ok {
			return &fs.PathError{Op: "put", Path: "memory:" + name, Err: fmt.Errorf("%s is a member, not a directory: %w", dir, ErrNotRegular)}
		}
	}
	m.members[name] = data
	return nil
}

// Rereadable reports that a member read again costs nothing.
func (m *MemStore) Rereadable() bool { return true }

// Remove deletes member name.
func (m *MemStore) Remove(ctx context.Context, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return &fs.PathError{Op: "remove", Path: "memory:" + name, Err: manifests.ErrUnsafePath}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.members[name]; !ok {
		if hasMemberBelow(m.members, name) {
			return &fs.PathError{Op: "remove", Path: "memory:" + name, Err: fmt.Errorf("a directory: %w", ErrNotRegular)}
		}
		return &fs.PathError{Op: "remove", Path: "memory:" + name, Err: fs.ErrNotExist}
	}
	delete(m.members, name)
	return nil
}
