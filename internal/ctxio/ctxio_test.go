package ctxio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// A copy stops at the first read after its context is cancelled.
func TestReaderStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &cancelAfter{r: bytes.NewReader(make([]byte, 1<<20)), n: 10, cancel: cancel}
	n, err := io.Copy(io.Discard, NewReader(ctx, src))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("copy: %v, want context.Canceled", err)
	}
	if n != 10 {
		t.Errorf("copied %d bytes, want the 10 before the cancellation", n)
	}
}

// Without cancellation every byte arrives, and Close reaches the source.
func TestReadCloserPassesThrough(t *testing.T) {
	c := &closer{Reader: bytes.NewReader([]byte("hello"))}
	rc := NewReadCloser(context.Background(), c)
	b, err := io.ReadAll(rc)
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := rc.Close(); err != nil || !c.closed {
		t.Errorf("close: %v, closed %v", err, c.closed)
	}
}

// cancelAfter returns n bytes of r in its first Read and cancels.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n > 0 {
		p = p[:min(len(p), c.n)]
		c.n = 0
		defer c.cancel()
	}
	return c.r.Read(p)
}

type closer struct {
	io.Reader
	closed bool
}

func (c *closer) Close() error { c.closed = true; return nil }

// Copy moves every byte, across many of its buffers, and from several
// goroutines at once (the buffers come from one pool).
func TestCopy(t *testing.T) {
	src := make([]byte, 3*copyBufSize+17)
	for i := range src {
		src[i] = byte(i * 7)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var dst bytes.Buffer
			n, err := Copy(struct{ io.Writer }{&dst}, struct{ io.Reader }{bytes.NewReader(src)})
			if err == nil && (n != int64(len(src)) || !bytes.Equal(dst.Bytes(), src)) {
				err = errors.New("copy differs from its source")
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
