package manifests_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// Issue 25: an endless index peaked at 183 MB of memory before its 64 MiB
// bound refused it (a doubling buffer). ReadLimited allocates the limit
// and no more on an endless stream, and reads a document whole in
// several chunks.
func TestReadLimitedEndless(t *testing.T) {
	const limit = 16 << 20
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, err := manifests.ReadLimited(endless{}, limit)
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, manifests.ErrTooLarge) {
		t.Fatalf("an endless stream: %v, want ErrTooLarge", err)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > limit+limit/8 {
		t.Errorf("reading an endless stream to a %d-byte limit allocated %d bytes", limit, alloc)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), (3<<20+5)/16)
	got, err := manifests.ReadLimited(bytes.NewReader(want), limit)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a %d-byte document: %v, %d bytes back", len(want), err, len(got))
	}
	if got, err := manifests.ReadLimited(io.LimitReader(endless{}, limit), limit); err != nil || len(got) != limit {
		t.Fatalf("a document of exactly the limit: %v, %d bytes", err, len(got))
	}
	if got, err := manifests.ReadLimited(bytes.NewReader(nil), limit); err != nil || len(got) != 0 {
		t.Fatalf("an empty document: %v, %d bytes", err, len(got))
	}
}
