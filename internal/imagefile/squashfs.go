package imagefile

import (
	"bytes"
	"context"
	"io"

	"github.com/strata-dev/strata/internal/squashfs"
)

// Squashfs is the squashfs form, through squashfs-tools and
// squashfs-tools-ng (see package squashfs).
var Squashfs Format = squashfsFormat{}

type squashfsFormat struct{}

func (squashfsFormat) Name() string { return "squashfs" }

// Match: the superblock starts with the magic "hsqs" (little endian).
func (squashfsFormat) Match(head []byte) bool { return bytes.HasPrefix(head, []byte("hsqs")) }

func (squashfsFormat) Write(ctx context.Context, out string, opts WriteOptions, fill func(w io.Writer) error) error {
	return squashfs.Write(ctx, out, squashfs.WriteOptions{Compressor: opts.Compressor, Epoch: opts.Epoch}, fill)
}

func (squashfsFormat) Open(ctx context.Context, image string) (io.ReadCloser, error) {
	return squashfs.Open(ctx, image)
}

func (squashfsFormat) Cat(ctx context.Context, image, rel string) ([]byte, error) {
	return squashfs.Cat(ctx, image, rel)
}

func (squashfsFormat) CatFiles(ctx context.Context, image string, files []File, each func(i int, content []byte) error) error {
	return squashfs.CatFiles(ctx, image, files, each)
}
