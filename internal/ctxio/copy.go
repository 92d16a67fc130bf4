package ctxio

import (
	"io"
	"sync"
)

// copyBufSize is the size of Copy's buffers: large enough that a file of
// a few hundred kilobytes takes a few reads.
const copyBufSize = 128 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// Copy is io.Copy with a buffer taken from a pool the process shares:
// io.Copy allocates a buffer for each call where neither side offers
// WriterTo or ReaderFrom (a hash, a tar member, a reader from this
// package), so copying each of thousands of files would touch fresh
// memory for each, and page faults are dear.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(dst, src, *buf)
}
