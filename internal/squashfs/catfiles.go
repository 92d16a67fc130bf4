package squashfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// File is a regular file to read from an image: its tree-relative path
// and the size the caller expects it to have.
type File struct {
	Rel  string
	Size int64
}

// catArgs bounds the paths one `unsquashfs -cat` is given (and so the
// command line's length: manifest paths are at most 4 KiB).
const catArgs = 256

// CatFiles reads files from image, one `unsquashfs -cat` for up to 256 of
// them instead of a process each, and calls each with every file's index
// and content, in order. unsquashfs writes the contents back to back, in
// the order of its arguments, so they are told apart by the sizes given:
// a file whose size in the image is not the one given, or that is
// missing, throws the split off. The caller must check every content it
// gets (by digest) and read a file that fails the check on its own (Cat).
// Output beyond the sizes' sum, and any failure of unsquashfs, end it
// with an error.
func CatFiles(ctx context.Context, image string, files []File, each func(i int, content []byte) error) error {
	bin, err := exec.LookPath("unsquashfs")
	if err != nil {
		return fmt.Errorf("%w: unsquashfs not found (install squashfs-tools): %v", ErrTool, err)
	}
	for start := 0; start < len(files); start += catArgs {
		batch := files[start:min(start+catArgs, len(files))]
		if err := catBatch(ctx, bin, image, batch, func(i int, b []byte) error { return each(start+i, b) }); err != nil {
			return err
		}
	}
	return nil
}

func catBatch(ctx context.Context, bin, image string, files []File, each func(i int, content []byte) error) error {
	arg := image
	if strings.HasPrefix(arg, "-") {
		arg = "./" + arg // a path, never an option
	}
	args := []string{"-no-progress", "-cat", arg}
	for _, f := range files {
		if f.Size < 0 {
			return fmt.Errorf("reading %s from image %s: negative size %d", f.Rel, image, f.Size)
		}
		args = append(args, pattern(f.Rel))
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	cmd.Env = append(withoutEnv(os.Environ(), "LC_ALL"), "LC_ALL=C")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("reading from image %s: %w", image, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("reading from image %s: %w", image, toolErr(ctx, err))
	}
	rerr := func() error {
		for i, f := range files {
			b := make([]byte, f.Size)
			if _, err := io.ReadFull(out, b); err != nil {
				return fmt.Errorf("reading %s from image %s: %w", f.Rel, image, err)
			}
			if err := each(i, b); err != nil {
				return err
			}
		}
		if n, _ := io.CopyN(io.Discard, out, 1); n > 0 {
			return fmt.Errorf("reading from image %s: unsquashfs wrote more than the %d files' sizes", image, len(files))
		}
		return nil
	}()
	if rerr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	switch {
	case rerr != nil && ctx.Err() != nil:
		return ctx.Err()
	case rerr != nil:
		return rerr
	case werr != nil:
		return fmt.Errorf("reading from image %s: %w: %s", image, toolErr(ctx, werr), strings.TrimSpace(stderr.String()))
	}
	return nil
}

// pattern is rel as a pattern unsquashfs matches only rel with: every
// byte but the separators escaped (it matches its arguments as shell
// patterns, extended ones included, byte by byte in the C locale it is
// run in), and so no argument starts with "-".
func pattern(rel string) string {
	b := make([]byte, 0, 2*len(rel))
	for i := range len(rel) {
		if rel[i] != '/' {
			b = append(b, '\\')
		}
		b = append(b, rel[i])
	}
	return string(b)
}
