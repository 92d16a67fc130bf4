package patch

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Limits of patching. Files outside them ship whole.
const (
	// MinContent is the smallest new content worth a patch: below it,
	// the overlay's own compression does as well and reading the old
	// content back from the repository costs more than it saves.
	MinContent = 64 << 10
	// MaxContent bounds the old and the new content of a patch: both are
	// held in memory to make or apply it.
	MaxContent = 64 << 20
	// maxWindow is the largest zstd window a patch may ask for: the
	// power of two at or above MaxContent.
	maxWindow = MaxContent
)

// level is the zstd level patches are made at: the default level finds
// few of the long matches a dictionary the size of a library offers.
const level = zstd.SpeedBetterCompression

// ErrPatch reports a patch that does not rebuild a file: not a zstd
// frame, one that needs more memory than allowed, or one whose result has
// another size than the caller expects.
var ErrPatch = errors.New("the patch does not rebuild the file")

// Worth reports whether a file whose content goes from oldSize to
// newSize bytes may ship as a patch.
func Worth(oldSize, newSize int64) bool {
	return newSize >= MinContent && newSize <= MaxContent && oldSize > 0 && oldSize <= MaxContent
}

// window returns the zstd window that lets a frame reach back over the
// whole dictionary: the power of two at or above the larger content.
func window(oldSize, newSize int) int {
	n := max(oldSize, newSize, zstd.MinWindowSize)
	return 1 << bits.Len(uint(n-1))
}

// Make returns the patch that rebuilds newContent from oldContent. The
// same contents always give the same bytes.
func Make(oldContent, newContent []byte) ([]byte, error) {
	if !Worth(int64(len(oldContent)), int64(len(newContent))) {
		return nil, fmt.Errorf("making patch: contents of %d and %d bytes are outside the limits (%d to %d bytes)", len(oldContent), len(newContent), MinContent, MaxContent)
	}
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderDictRaw(0, oldContent),
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(window(len(oldContent), len(newContent))),
		zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, fmt.Errorf("making patch: %w", err)
	}
	defer enc.Close()
	return enc.EncodeAll(newContent, nil), nil
}

// Compressed returns the size content has compressed on its own, with
// the settings Make uses but no dictionary: the measure a patch must
// beat.
func Compressed(content []byte) int {
	enc, err := plain()
	if err != nil {
		return len(content)
	}
	return len(enc.EncodeAll(content, nil))
}

// plain is the encoder Compressed uses, made once (EncodeAll may be
// called concurrently).
var plain = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true))
})

// Apply rebuilds a file from oldContent and patch p. The result must be
// exactly size bytes (at most MaxContent): decoding stops past it, so a
// hostile patch can make neither endless output nor a large allocation.
func Apply(oldContent, p []byte, size int64) ([]byte, error) {
	if size < 0 || size > MaxContent || int64(len(oldContent)) > MaxContent {
		return nil, fmt.Errorf("%w: contents of %d and %d bytes are outside the limits", ErrPatch, len(oldContent), size)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderDictRaw(0, oldContent),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxWindow),
		zstd.WithDecoderMaxMemory(uint64(size)+1))
	if err != nil {
		return nil, fmt.Errorf("applying patch: %w", err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(p, make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	if int64(len(out)) != size {
		return nil, fmt.Errorf("%w: it gives %d bytes, expected %d", ErrPatch, len(out), size)
	}
	return out, nil
}
