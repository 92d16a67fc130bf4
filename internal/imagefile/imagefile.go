package imagefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/squashfs"
)

// ErrFormat reports an image file in no registered format.
var ErrFormat = errors.New("imagefile: not an image in a known format")

// WriteOptions tune Format.Write.
type WriteOptions struct {
	// Compressor is the squashfs compressor (default zstd); Tar ignores it.
	Compressor string
	// Epoch fixes every timestamp in the image.
	Epoch int64
}

// Format is one way of storing a root image: written from a tar stream,
// read back as a tar stream of the same tree or one file at a time.
type Format interface {
	// Name is the format's short name ("squashfs", "tar").
	Name() string
	// Match reports whether head, the first bytes of a file (up to
	// HeadSize), is an image in this format.
	Match(head []byte) bool
	// Write makes the image out from the tar stream fill writes. out is
	// replaced only when the whole image was written.
	Write(ctx context.Context, out string, opts WriteOptions, fill func(w io.Writer) error) error
	// Open streams the image's tree as an uncompressed tar; Close reports
	// a failure to read the image to its end.
	Open(ctx context.Context, image string) (io.ReadCloser, error)
	// Cat returns the content of the regular file at tree-relative path
	// rel, reading nothing else.
	Cat(ctx context.Context, image, rel string) ([]byte, error)
	// CatFiles reads many regular files at once and calls each with a
	// file's index in files and its content, in any order. A content may
	// not be the file's when the image does not hold it at the size
	// given: the caller checks each (by digest) and reads a file that
	// fails on its own with Cat.
	CatFiles(ctx context.Context, image string, files []File, each func(i int, content []byte) error) error
}

// File is a regular file for CatFiles: its tree-relative path and the
// size the caller expects.
type File = squashfs.File

// HeadSize is how many leading bytes Detect reads to tell formats apart.
const HeadSize = 512

var (
	mu      sync.RWMutex
	formats = []Format{Squashfs}
)

// Register makes Detect (and so Open and Cat) recognise f too. Squashfs
// is always registered.
func Register(f Format) {
	mu.Lock()
	defer mu.Unlock()
	for _, g := range formats {
		if g.Name() == f.Name() {
			return
		}
	}
	formats = append(formats, f)
}

// Detect returns the registered format image is in, from its first bytes.
// image must be a regular file (a symlink to one will do).
func Detect(image string) (Format, error) {
	fd, err := safefile.OpenFollow(image)
	if errors.Is(err, safefile.ErrNotRegular) {
		return nil, fmt.Errorf("reading image %s: %w: %w", image, ErrFormat, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading image: %w", err)
	}
	defer fd.Close()
	head := make([]byte, HeadSize)
	n, err := io.ReadFull(fd, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("reading image %s: %w", image, err)
	}
	mu.RLock()
	defer mu.RUnlock()
	for _, f := range formats {
		if f.Match(head[:n]) {
			return f, nil
		}
	}
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name()
	}
	return nil, fmt.Errorf("reading image %s: %w (expected %v)", image, ErrFormat, names)
}

// Open streams image, in whichever registered format it is, as a tar.
func Open(ctx context.Context, image string) (io.ReadCloser, error) {
	f, err := Detect(image)
	if err != nil {
		return nil, err
	}
	return f.Open(ctx, image)
}

// Cat returns the regular file rel of image, in whichever registered
// format it is.
func Cat(ctx context.Context, image, rel string) ([]byte, error) {
	f, err := Detect(image)
	if err != nil {
		return nil, err
	}
	return f.Cat(ctx, image, rel)
}

// CatFiles reads files of image, in whichever registered format it is;
// see Format.CatFiles.
func CatFiles(ctx context.Context, image string, files []File, each func(i int, content []byte) error) error {
	f, err := Detect(image)
	if err != nil {
		return err
	}
	return f.CatFiles(ctx, image, files, each)
}
