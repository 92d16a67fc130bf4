package verity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"

	"golang.org/x/sync/errgroup"
)

// Algorithm is the only hash strata uses, as dm-verity names it.
const Algorithm = "sha256"

// BlockSize is the data and hash block size strata writes: the page
// size, which every kernel's dm-verity accepts.
const BlockSize = 4096

// MaxSalt is the longest salt veritysetup accepts, in bytes.
const MaxSalt = 256

// MaxDataBlocks bounds the data a tree covers: 2^24 blocks (64 GiB of
// 4 KiB blocks), whose digests take 512 MiB while the tree is computed.
const MaxDataBlocks = 1 << 24

const digestSize = sha256.Size

// ErrCorrupt reports data or a hash tree that does not match its root
// hash, or a tree cut short.
var ErrCorrupt = errors.New("dm-verity check failed")

// ErrParams reports parameters no dm-verity device could use.
var ErrParams = errors.New("invalid dm-verity parameters")

// Params describe a hash tree over a run of data blocks.
type Params struct {
	// DataBlockSize and HashBlockSize are in bytes: powers of two from
	// 512 to 1 MiB.
	DataBlockSize int
	HashBlockSize int
	// DataBlocks is how many data blocks the tree covers, from the start
	// of the data.
	DataBlocks int64
	// HashOffset is where the tree starts in its file, in bytes; a
	// multiple of HashBlockSize.
	HashOffset int64
	// Salt is prefixed to every hashed block (format 1).
	Salt []byte
}

// Validate refuses parameters the kernel or veritysetup would refuse.
func (p Params) Validate() error {
	for _, b := range []struct {
		name string
		size int
	}{{"data block size", p.DataBlockSize}, {"hash block size", p.HashBlockSize}} {
		if b.size < 512 || b.size > 1<<20 || b.size&(b.size-1) != 0 {
			return fmt.Errorf("%w: %s %d is not a power of two from 512 to 1048576", ErrParams, b.name, b.size)
		}
	}
	if p.DataBlocks < 1 {
		return fmt.Errorf("%w: %d data blocks", ErrParams, p.DataBlocks)
	}
	if p.DataBlocks > MaxDataBlocks {
		return fmt.Errorf("%w: %d data blocks (at most %d: the level-0 digests are held in memory)", ErrParams, p.DataBlocks, MaxDataBlocks)
	}
	if p.HashOffset < 0 || p.HashOffset%int64(p.HashBlockSize) != 0 {
		return fmt.Errorf("%w: hash offset %d is not a multiple of the hash block size %d", ErrParams, p.HashOffset, p.HashBlockSize)
	}
	if len(p.Salt) > MaxSalt {
		return fmt.Errorf("%w: salt of %d bytes (at most %d)", ErrParams, len(p.Salt), MaxSalt)
	}
	return nil
}

// DataSize is the number of data bytes the tree covers.
func (p Params) DataSize() int64 { return p.DataBlocks * int64(p.DataBlockSize) }

// perBlock is how many digests one hash block holds.
func (p Params) perBlock() int64 { return int64(p.HashBlockSize / digestSize) }

// levels returns the number of hash blocks of each level, level 0 (the
// one over the data) first. A single data block has no levels: its own
// digest is the root hash.
func (p Params) levels() []int64 {
	var sizes []int64
	for n := p.DataBlocks; n > 1; {
		n = (n + p.perBlock() - 1) / p.perBlock()
		sizes = append(sizes, n)
	}
	return sizes
}

// TreeSize is the size of the hash tree in bytes.
func (p Params) TreeSize() int64 {
	var n int64
	for _, s := range p.levels() {
		n += s
	}
	return n * int64(p.HashBlockSize)
}

// levelStart returns, for each level, the index of its first block within
// the tree: the top level is stored first.
func (p Params) levelStart() []int64 {
	sizes := p.levels()
	start := make([]int64, len(sizes))
	var at int64
	for i := len(sizes) - 1; i >= 0; i-- {
		start[i] = at
		at += sizes[i]
	}
	return start
}

// Tree is a computed hash tree.
type Tree struct {
	Params Params
	// Root is the root hash.
	Root []byte
	// Hash is the tree as it is stored, TreeSize bytes, top level first.
	Hash []byte
}

// RootHex is the root hash in lower-case hex, as veritysetup prints it.
func (t *Tree) RootHex() string { return hex.EncodeToString(t.Root) }

func (p Params) digest(block []byte) []byte {
	h := sha256.New()
	h.Write(p.Salt)
	h.Write(block)
	return h.Sum(nil)
}

// Compute reads the data blocks p names from data and returns their tree.
func Compute(ctx context.Context, data io.ReaderAt, p Params) (*Tree, error) {
	return compute(ctx, data, p, nil)
}

// compute is Compute that also writes the data, in order, to whole
// unless it is nil.
func compute(ctx context.Context, data io.ReaderAt, p Params, whole io.Writer) (*Tree, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	leaves, err := dataDigests(ctx, data, p, whole)
	if err != nil {
		return nil, err
	}
	if p.DataBlocks == 1 {
		return &Tree{Params: p, Root: leaves[:digestSize], Hash: []byte{}}, nil
	}
	sizes, start := p.levels(), p.levelStart()
	hb := int64(p.HashBlockSize)
	tree := make([]byte, p.TreeSize())
	below := leaves
	for i, n := range sizes {
		lvl := tree[start[i]*hb : (start[i]+n)*hb]
		copy(lvl, below)
		if i+1 == len(sizes) {
			break
		}
		next := make([]byte, n*digestSize)
		for j := int64(0); j < n; j++ {
			copy(next[j*digestSize:], p.digest(lvl[j*hb:(j+1)*hb]))
		}
		below = next
	}
	top := tree[start[len(sizes)-1]*hb : (start[len(sizes)-1]+1)*hb]
	return &Tree{Params: p, Root: p.digest(top), Hash: tree}, nil
}

// chunkBlocks is how many data blocks a worker reads at once.
const chunkBlocks = 256

// dataDigests returns the digests of every data block, in order, hashed
// by one worker per CPU. Each worker reads its own chunks, unless whole
// is set: then one reader reads the chunks in order, writes each to whole
// (the SHA-256 of a whole file, computed in the same pass) and hands it
// on to the workers.
func dataDigests(ctx context.Context, data io.ReaderAt, p Params, whole io.Writer) ([]byte, error) {
	out := make([]byte, p.DataBlocks*digestSize)
	chunks := (p.DataBlocks + chunkBlocks - 1) / chunkBlocks
	bs := int64(p.DataBlockSize)
	workers := runtime.GOMAXPROCS(0)
	g, ctx := errgroup.WithContext(ctx)
	type chunk struct {
		first, n int64
		buf      []byte // read already, when whole is set
	}
	next := make(chan chunk)
	// free holds the buffers an ordered reader fills, one for each
	// worker and one being filled.
	free := make(chan []byte, workers+1)
	read := func(b []byte, first, n int64) error {
		if got, err := data.ReadAt(b, first*bs); err != nil && !(errors.Is(err, io.EOF) && got == len(b)) {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: the data ends before block %d of %d", ErrCorrupt, first+n, p.DataBlocks)
			}
			return fmt.Errorf("reading data blocks %d-%d: %w", first, first+n-1, err)
		}
		return nil
	}
	g.Go(func() error {
		defer close(next)
		if whole != nil {
			for range min(int64(workers), chunks) + 1 {
				free <- make([]byte, chunkBlocks*bs)
			}
		}
		for c := int64(0); c < chunks; c++ {
			ch := chunk{first: c * chunkBlocks, n: min(chunkBlocks, p.DataBlocks-c*chunkBlocks)}
			if whole != nil {
				var b []byte
				select {
				case b = <-free:
				case <-ctx.Done():
					return ctx.Err()
				}
				ch.buf = b[:ch.n*bs]
				if err := read(ch.buf, ch.first, ch.n); err != nil {
					return err
				}
				if _, err := whole.Write(ch.buf); err != nil {
					return err
				}
			}
			select {
			case next <- ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			var own []byte
			h := sha256.New()
			for ch := range next {
				b := ch.buf
				if b == nil {
					if own == nil {
						own = make([]byte, chunkBlocks*bs)
					}
					b = own[:ch.n*bs]
					if err := read(b, ch.first, ch.n); err != nil {
						return err
					}
				}
				for k := int64(0); k < ch.n; k++ {
					i := ch.first + k
					h.Reset()
					h.Write(p.Salt)
					h.Write(b[k*bs : (k+1)*bs])
					h.Sum(out[i*digestSize : i*digestSize : (i+1)*digestSize])
				}
				if ch.buf != nil {
					free <- ch.buf[:cap(ch.buf)]
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Verify checks data and its stored tree against a root hash as the
// kernel does: the top hash block against the root, every hash block
// against its entry one level up (which covers the zeros that pad it), and
// every data block against level 0. The error names the first block that
// does not match.
func Verify(ctx context.Context, data, hash io.ReaderAt, p Params, root []byte) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(root) != digestSize {
		return fmt.Errorf("%w: a root hash of %d bytes (sha256 has %d)", ErrParams, len(root), digestSize)
	}
	stored := make([]byte, p.TreeSize())
	if n, err := hash.ReadAt(stored, p.HashOffset); err != nil && !(errors.Is(err, io.EOF) && n == len(stored)) {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the hash tree is cut short: %d of %d bytes at offset %d", ErrCorrupt, n, len(stored), p.HashOffset)
		}
		return fmt.Errorf("reading the hash tree: %w", err)
	}
	leaves, err := dataDigests(ctx, data, p, nil)
	if err != nil {
		return err
	}
	if p.DataBlocks == 1 {
		if !bytes.Equal(leaves, root) {
			return fmt.Errorf("%w: data block 0 does not match the root hash", ErrCorrupt)
		}
		return nil
	}
	sizes, start := p.levels(), p.levelStart()
	hb := int64(p.HashBlockSize)
	top := len(sizes) - 1
	if !bytes.Equal(p.digest(stored[start[top]*hb:(start[top]+1)*hb]), root) {
		return fmt.Errorf("%w: the top hash block (byte %d) does not match the root hash: a wrong root hash or salt, or a changed tree", ErrCorrupt, p.HashOffset+start[top]*hb)
	}
	for i := top; i >= 0; i-- {
		lvl := stored[start[i]*hb : (start[i]+sizes[i])*hb]
		var count int64 // entries this level holds
		if i == 0 {
			count = p.DataBlocks
		} else {
			count = sizes[i-1]
		}
		if i == 0 {
			for j := int64(0); j < count; j++ {
				if !bytes.Equal(lvl[j*digestSize:(j+1)*digestSize], leaves[j*digestSize:(j+1)*digestSize]) {
					return fmt.Errorf("%w: data block %d (bytes %d-%d) does not match its hash", ErrCorrupt, j, j*int64(p.DataBlockSize), (j+1)*int64(p.DataBlockSize)-1)
				}
			}
			break
		}
		below := stored[start[i-1]*hb : (start[i-1]+count)*hb]
		for j := int64(0); j < count; j++ {
			if !bytes.Equal(lvl[j*digestSize:(j+1)*digestSize], p.digest(below[j*hb:(j+1)*hb])) {
				return fmt.Errorf("%w: hash block %d of level %d (byte %d) does not match its hash", ErrCorrupt, j, i-1, p.HashOffset+(start[i-1]+j)*hb)
			}
		}
	}
	return ctx.Err()
}

// MatchesRoot reports whether the stored tree at p.HashOffset in hash
// starts with a top hash block whose digest is root (for a single data
// block, whether that block's digest is): one read of one block, enough
// to tell which of several devices holds the image a root hash names,
// never enough to trust it. Only the kernel's or Verify's check of every
// block does that.
func MatchesRoot(hash io.ReaderAt, p Params, root []byte) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	off, size := p.HashOffset, int64(p.HashBlockSize)
	if p.DataBlocks == 1 {
		off, size = 0, int64(p.DataBlockSize)
	} else {
		sizes, start := p.levels(), p.levelStart()
		off += start[len(sizes)-1] * size
	}
	b := make([]byte, size)
	if n, err := hash.ReadAt(b, off); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, fmt.Errorf("reading the top hash block at byte %d: %w", off, err)
	}
	return bytes.Equal(p.digest(b), root), nil
}
