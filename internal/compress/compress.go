package compress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Algorithm names a compression format.
type Algorithm string

// Supported algorithms.
const (
	Zstd Algorithm = "zstd"
	Xz   Algorithm = "xz"
	Gzip Algorithm = "gzip"
	None Algorithm = "none"
)

// ErrUnknown reports an unsupported algorithm name or an unrecognised
// stream.
var ErrUnknown = errors.New("unknown compression")

// Parse checks an algorithm name; "" means zstd.
func Parse(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case "":
		return Zstd, nil
	case Zstd, Xz, Gzip, None:
		return a, nil
	}
	return "", fmt.Errorf("%w: %q (want zstd, xz, gzip or none)", ErrUnknown, s)
}

// Ext returns the file name suffix for a, such as ".zst".
func (a Algorithm) Ext() string {
	switch a {
	case Zstd:
		return ".zst"
	case Xz:
		return ".xz"
	case Gzip:
		return ".gz"
	}
	return ""
}

// NewWriter returns a compressing writer; closing it flushes the stream
// but does not close w, and a writer given up on must still be closed
// (xz may run as a process). The output is deterministic for the same
// input on a given host: xz streams are written by xz(1) where it is
// installed and by a pure-Go encoder where it is not (newXzWriter).
func NewWriter(w io.Writer, a Algorithm) (io.WriteCloser, error) {
	switch a {
	case Zstd, "":
		// Two: the next block is encoded while the last one is written
		// out. There is still one encoder and one block at a time (no
		// concurrent blocks), so the bytes are those of a concurrency of
		// one, whatever the host (TestZstdBytesIndependentOfConcurrency).
		return zstd.NewWriter(w, zstd.WithEncoderConcurrency(2), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(ZstdWindow))
	case Gzip:
		return gzip.NewWriterLevel(w, gzip.DefaultCompression)
	case Xz:
		return newXzWriter(w, xzTool())
	case None:
		return nopCloser{w}, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknown, a)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

var magics = []struct {
	a     Algorithm
	magic []byte
}{
	{Zstd, []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{Xz, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}},
	{Gzip, []byte{0x1f, 0x8b}},
}

// MaxXzDict bounds the LZMA2 dictionary an xz stream may ask for (xz -9
// asks for 64 MiB); the decoder refuses a block asking for more where it
// parses the block's header, before allocating (third_party/ulikunitz-xz
// adds the bound to the library).
const MaxXzDict = 64 << 20

// ErrXzDict reports an xz block asking for a dictionary over MaxXzDict.
var ErrXzDict = xz.ErrDictCap

// ZstdWindow is the window of the zstd streams strata writes: 2 MiB,
// what zstd(1) uses at level 3. A decoder holds a window and two blocks
// in memory, so every node that applies an overlay, and every agent, pays
// for it; the encoder's default of 8 MiB made a 400-file overlay no
// smaller (5.79 MB either way) and its apply slower, mostly in faulting
// in the larger buffer.
const ZstdWindow = 2 << 20

// MaxZstdWindow bounds the window a zstd frame may ask for (strata writes
// ZstdWindow, 2 MiB; zstd --long=26 asks for 64 MiB): the decoder refuses a
// frame over it before allocating, whatever the frame says.
const MaxZstdWindow = 64 << 20

// NewReader detects the compression of r from its first bytes and returns
// a decompressing reader and the algorithm found. Data that matches no
// magic is returned as is (None). Close releases decoder resources.
func NewReader(r io.Reader) (io.ReadCloser, Algorithm, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(6)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, "", fmt.Errorf("reading compression header: %w", err)
	}
	for _, m := range magics {
		if !bytes.HasPrefix(head, m.magic) {
			continue
		}
		switch m.a {
		case Zstd:
			d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(MaxZstdWindow), zstd.WithDecoderMaxMemory(1<<30))
			if err != nil {
				return nil, "", fmt.Errorf("opening zstd stream: %w", err)
			}
			return zstdCloser{d}, Zstd, nil
		case Xz:
			d, err := xz.ReaderConfig{MaxDictCap: MaxXzDict}.NewReader(br)
			if err != nil {
				return nil, "", fmt.Errorf("opening xz stream: %w", err)
			}
			return io.NopCloser(d), Xz, nil
		case Gzip:
			d, err := gzip.NewReader(br)
			if err != nil {
				return nil, "", fmt.Errorf("opening gzip stream: %w", err)
			}
			return d, Gzip, nil
		}
	}
	return io.NopCloser(br), None, nil
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }
