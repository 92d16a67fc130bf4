package ctxio

import (
	"context"
	"io"
)

// NewReader returns a Reader that reads r until ctx is done; from then on
// each Read returns ctx.Err().
func NewReader(ctx context.Context, r io.Reader) io.Reader {
	return &reader{ctx, r}
}

// NewReadCloser is NewReader for an io.ReadCloser; Close closes rc.
func NewReadCloser(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{NewReader(ctx, rc), rc}
}

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
