package imagefile

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/safefile"
)

// Tar is the tar form: the build's tar stream stored as it is, read back
// with no external tool. It is recognised only once registered
// (Register(Tar)); it is a test form, which the kernel cannot mount.
var Tar Format = tarFormat{}

type tarFormat struct{}

func (tarFormat) Name() string { return "tar" }

// Match: a POSIX tar header has "ustar" at offset 257.
func (tarFormat) Match(head []byte) bool {
	return len(head) >= 262 && string(head[257:262]) == "ustar"
}

func (tarFormat) Write(ctx context.Context, out string, _ WriteOptions, fill func(w io.Writer) error) error {
	tmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp")
	fd, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("writing image %s: %w", out, err)
	}
	bw := bufio.NewWriter(fd)
	err = fill(bw)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w", out, err)
	}
	return nil
}

func (tarFormat) Open(ctx context.Context, image string) (io.ReadCloser, error) {
	fd, err := safefile.OpenFollow(image)
	if err != nil {
		return nil, fmt.Errorf("reading image: %w", err)
	}
	return ctxio.NewReadCloser(ctx, fd), nil
}

func (tarFormat) Cat(ctx context.Context, image, rel string) ([]byte, error) {
	fd, err := safefile.OpenFollow(image)
	if err != nil {
		return nil, fmt.Errorf("reading %s from image: %w", rel, err)
	}
	defer fd.Close()
	tr := tar.NewReader(ctxio.NewReader(ctx, fd))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("reading %s from image %s: %w", rel, image, os.ErrNotExist)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s from image %s: %w", rel, image, err)
		}
		if path.Clean("/" + h.Name)[1:] != rel {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("reading %s from image %s: not a regular file", rel, image)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("reading %s from image %s: %w", rel, image, err)
		}
		return b, nil
	}
}

// CatFiles reads the tar once, keeping the files asked for; one that is
// not a regular file of the size given, or is missing, is an error.
func (tarFormat) CatFiles(ctx context.Context, image string, files []File, each func(i int, content []byte) error) error {
	want := make(map[string][]int, len(files))
	for i, f := range files {
		want[f.Rel] = append(want[f.Rel], i)
	}
	fd, err := safefile.OpenFollow(image)
	if err != nil {
		return fmt.Errorf("reading from image: %w", err)
	}
	defer fd.Close()
	tr := tar.NewReader(ctxio.NewReader(ctx, fd))
	for len(want) > 0 {
		h, err := tr.Next()
		if err == io.EOF {
			for rel := range want {
				return fmt.Errorf("reading %s from image %s: %w", rel, image, os.ErrNotExist)
			}
		}
		if err != nil {
			return fmt.Errorf("reading from image %s: %w", image, err)
		}
		rel := path.Clean("/" + h.Name)[1:]
		idx, ok := want[rel]
		if !ok {
			continue
		}
		delete(want, rel)
		if size := files[idx[0]].Size; h.Typeflag != tar.TypeReg || h.Size != size {
			return fmt.Errorf("reading %s from image %s: not a regular file of %d bytes", rel, image, size)
		}
		b := make([]byte, h.Size)
		if _, err := io.ReadFull(tr, b); err != nil {
			return fmt.Errorf("reading %s from image %s: %w", rel, image, err)
		}
		for _, i := range idx {
			if err := each(i, b); err != nil {
				return err
			}
		}
	}
	return nil
}
