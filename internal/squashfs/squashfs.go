package squashfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrTool reports a missing or failing external tool.
var ErrTool = errors.New("squashfs tool failed")

// WriteOptions tune Write.
type WriteOptions struct {
	// Compressor is passed to mksquashfs -comp (default zstd).
	Compressor string
	// Epoch fixes every timestamp in the image.
	Epoch int64
}

// Write runs `mksquashfs - out -tar` with fill writing the tar stream to
// its standard input. The image is written beside out and renamed into
// place only when mksquashfs succeeds, so out is never left half written.
func Write(ctx context.Context, out string, opts WriteOptions, fill func(w io.Writer) error) error {
	bin, err := exec.LookPath("mksquashfs")
	if err != nil {
		return fmt.Errorf("%w: mksquashfs not found (install squashfs-tools): %v", ErrTool, err)
	}
	comp := opts.Compressor
	if comp == "" {
		comp = "zstd"
	}
	tmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp")
	_ = os.Remove(tmp)
	epoch := strconv.FormatInt(opts.Epoch, 10)
	cmd := exec.CommandContext(ctx, bin, "-", tmp, "-tar", "-no-strip", "-noappend",
		"-comp", comp, "-mkfs-time", epoch, "-all-time", epoch,
		"-root-mode", "0755", "-root-uid", "0", "-root-gid", "0",
		"-no-xattrs", "-quiet", "-no-progress")
	// mksquashfs refuses SOURCE_DATE_EPOCH together with -mkfs-time and
	// -all-time; the epoch is passed explicitly instead.
	cmd.Env = withoutEnv(os.Environ(), "SOURCE_DATE_EPOCH")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("writing image %s: %w", out, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("writing image %s: %w", out, toolErr(ctx, err))
	}
	fillErr := fill(stdin)
	closeErr := stdin.Close()
	waitErr := cmd.Wait()
	if waitErr != nil {
		// A tool failure also breaks the pipe; its own message says why.
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w: %s", out, toolErr(ctx, fmt.Errorf("mksquashfs: %v", waitErr)), strings.TrimSpace(stderr.String()))
	}
	if fillErr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w", out, fillErr)
	}
	if closeErr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w: %s", out, toolErr(ctx, fmt.Errorf("mksquashfs: %v", closeErr)), strings.TrimSpace(stderr.String()))
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s: %w", out, err)
	}
	return nil
}

// Reader streams an image as an uncompressed tar archive.
type Reader struct {
	io.Reader
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	path   string
	ctx    context.Context
}

// Open starts `sqfs2tar image` and returns its tar output. Close waits for
// the tool and reports its failure.
func Open(ctx context.Context, image string) (*Reader, error) {
	bin, err := exec.LookPath("sqfs2tar")
	if err != nil {
		return nil, fmt.Errorf("%w: sqfs2tar not found (install squashfs-tools-ng): %v", ErrTool, err)
	}
	if _, err := os.Stat(image); err != nil {
		return nil, fmt.Errorf("reading image: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "--no-xattr", "--no-hard-links", "--no-skip", image)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("reading image %s: %w", image, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("reading image %s: %w", image, toolErr(ctx, err))
	}
	return &Reader{Reader: out, cmd: cmd, stderr: &stderr, path: image, ctx: ctx}, nil
}

// Close drains the stream and waits for sqfs2tar.
func (r *Reader) Close() error {
	_, _ = io.Copy(io.Discard, r.Reader)
	if err := r.cmd.Wait(); err != nil {
		return fmt.Errorf("reading image %s: %w: %s", r.path, toolErr(r.ctx, fmt.Errorf("sqfs2tar: %v", err)), strings.TrimSpace(r.stderr.String()))
	}
	return nil
}

// toolErr is the error of a tool run under ctx: ctx's own error when ctx
// ended (the tool was killed for it: the command was interrupted, not the
// tool broken), else ErrTool with err.
func toolErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %v", ErrTool, err)
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
