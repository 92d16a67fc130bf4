package compress

import (
	"errors"
	"fmt"
	"io"
)

// MaxXzDict bounds the LZMA2 dictionary an xz stream may ask for (xz -9
// asks for 64 MiB). github.com/ulikunitz/xz allocates whatever a block
// header names, before a single byte is verified, so every block header
// is checked on its way to the decoder.
const MaxXzDict = 64 << 20

// ErrXzDict reports an xz block asking for a dictionary over MaxXzDict.
var ErrXzDict = errors.New("compress: xz dictionary too large")

// xzGuard passes an xz stream through unchanged while following its
// container (stream headers, block headers, LZMA2 chunks, index, footer,
// padding) and fails the read that carries the end of a block header
// whose LZMA2 dictionary exceeds MaxXzDict, before the decoder sees the
// whole header. What it cannot follow it leaves to the decoder, which
// refuses malformed streams on its own; it stops guarding then.
type xzGuard struct {
	r io.Reader

	state   xzState
	need    int    // bytes still to skip or collect in this state
	buf     []byte // collected bytes (headers, varints)
	check   int    // size of a block's check field
	blockN  int64  // bytes of the current block (for its padding)
	indexN  int64  // bytes of the current index (for its padding)
	records int64  // index records still to read (two varints each)
	lzma    []byte // an LZMA2 chunk header being collected
	off     bool   // stopped guarding
}

type xzState int

const (
	xzStreamHeader xzState = iota
	xzBlockOrIndex
	xzBlockHeader
	xzChunk
	xzSkip // chunk data, then back to xzChunk
	xzBlockPadding
	xzCheck
	xzIndexCount
	xzIndexRecords
	xzIndexPadding
	xzFooter
	xzStreamPadding
)

func newXzGuard(r io.Reader) *xzGuard {
	return &xzGuard{r: r, state: xzStreamHeader, need: 12}
}

func (g *xzGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if !g.off {
		for _, b := range p[:n] {
			if ferr := g.feed(b); ferr != nil {
				return 0, ferr
			}
			if g.off {
				break
			}
		}
	}
	return n, err
}

// checkSizes are the sizes of an xz check field by check ID.
var checkSizes = [16]int{0, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64}

func (g *xzGuard) feed(b byte) error {
	switch g.state {
	case xzStreamHeader:
		g.buf = append(g.buf, b)
		if len(g.buf) < 12 {
			return nil
		}
		g.check = checkSizes[g.buf[7]&0x0f]
		g.buf = g.buf[:0]
		g.state = xzBlockOrIndex
	case xzBlockOrIndex:
		if b == 0 {
			g.state, g.indexN, g.buf = xzIndexCount, 1, g.buf[:0]
			return nil
		}
		g.buf = append(g.buf[:0], b)
		g.need = (int(b) + 1) * 4
		g.state = xzBlockHeader
	case xzBlockHeader:
		g.buf = append(g.buf, b)
		if len(g.buf) < g.need {
			return nil
		}
		if err := checkBlockHeader(g.buf); err != nil {
			return err
		}
		g.blockN = int64(len(g.buf))
		g.state = xzChunk
		g.lzma = g.lzma[:0]
	case xzChunk:
		g.blockN++
		g.lzma = append(g.lzma, b)
		c := g.lzma[0]
		switch {
		case c == 0x00: // end of the LZMA2 stream
			g.state = xzBlockPadding
			g.need = int((4 - g.blockN%4) % 4)
			if g.need == 0 {
				g.state, g.need = xzCheck, g.check
				if g.need == 0 {
					g.state = xzBlockOrIndex
				}
			}
		case c == 0x01 || c == 0x02: // uncompressed chunk
			if len(g.lzma) == 3 {
				g.state, g.need = xzSkip, int(g.lzma[1])<<8|int(g.lzma[2])+1
			}
		case c >= 0x80: // LZMA chunk: sizes, then props when the reset asks
			hdr := 5
			if (c>>5)&3 >= 2 {
				hdr = 6
			}
			if len(g.lzma) == hdr {
				g.state, g.need = xzSkip, int(g.lzma[3])<<8|int(g.lzma[4])+1
			}
		default:
			g.off = true // not LZMA2: the decoder refuses it
		}
	case xzSkip:
		g.blockN++
		if g.need--; g.need == 0 {
			g.state, g.lzma = xzChunk, g.lzma[:0]
		}
	case xzBlockPadding:
		if g.need--; g.need == 0 {
			g.state, g.need = xzCheck, g.check
			if g.need == 0 {
				g.state = xzBlockOrIndex
			}
		}
	case xzCheck:
		if g.need--; g.need == 0 {
			g.state = xzBlockOrIndex
		}
	case xzIndexCount, xzIndexRecords:
		g.indexN++
		g.buf = append(g.buf, b)
		if b&0x80 != 0 {
			if len(g.buf) > 9 {
				g.off = true
			}
			return nil
		}
		v := uvarint(g.buf)
		g.buf = g.buf[:0]
		if g.state == xzIndexCount {
			if v > 1<<40 {
				g.off = true
				return nil
			}
			g.records, g.state = int64(v)*2, xzIndexRecords
		} else {
			g.records--
		}
		if g.records == 0 {
			g.state, g.need = xzIndexPadding, int((4-g.indexN%4)%4)+4 // padding, CRC32
		}
	case xzIndexPadding:
		if g.need--; g.need == 0 {
			g.state, g.need = xzFooter, 12
		}
	case xzFooter:
		if g.need--; g.need == 0 {
			g.state = xzStreamPadding
		}
	case xzStreamPadding:
		if b == 0 {
			return nil
		}
		// The next stream begins (its magic's first byte is this one).
		g.state, g.buf = xzStreamHeader, append(g.buf[:0], b)
	}
	return nil
}

// checkBlockHeader refuses a block header whose LZMA2 filter asks for a
// dictionary over MaxXzDict. h is the whole header.
func checkBlockHeader(h []byte) error {
	if len(h) < 2 {
		return nil
	}
	flags := h[1]
	rest := h[2:]
	skipVarint := func() bool {
		for i, c := range rest {
			if c&0x80 == 0 {
				rest = rest[i+1:]
				return true
			}
		}
		return false
	}
	if flags&0x40 != 0 && !skipVarint() {
		return nil
	}
	if flags&0x80 != 0 && !skipVarint() {
		return nil
	}
	for range int(flags&0x03) + 1 {
		id, ok := readVarint(&rest)
		if !ok {
			return nil
		}
		size, ok := readVarint(&rest)
		if !ok || uint64(len(rest)) < size {
			return nil
		}
		props := rest[:size]
		rest = rest[size:]
		if id == 0x21 && size == 1 {
			if d := lzma2Dict(props[0]); d > MaxXzDict {
				return fmt.Errorf("%w: a block asks for %d MiB (at most %d MiB)", ErrXzDict, d>>20, MaxXzDict>>20)
			}
		}
	}
	return nil
}

// lzma2Dict decodes the dictionary size byte of an LZMA2 filter.
func lzma2Dict(b byte) uint64 {
	b &= 0x3f
	if b >= 40 {
		return 1<<32 - 1
	}
	return uint64(2|b&1) << (b/2 + 11)
}

func readVarint(b *[]byte) (uint64, bool) {
	for i, c := range *b {
		if i >= 9 {
			return 0, false
		}
		if c&0x80 == 0 {
			v := uvarint((*b)[:i+1])
			*b = (*b)[i+1:]
			return v, true
		}
	}
	return 0, false
}

// uvarint decodes an xz multibyte integer (little-endian base 128).
func uvarint(b []byte) uint64 {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
	}
	return v
}
