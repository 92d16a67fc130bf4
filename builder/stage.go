package builder

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Stage unpacks the tree of chain c (a line verified by repo.LoadChain up
// to its last element) into the existing empty directory dir: the image's
// files that survive and each overlay's payload, every file checked
// against the folded tree as it streams. It is what a service's
// validation command runs against before a change is published.
func Stage(ctx context.Context, c *repo.Chain, dir string) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := foldStream(ctx, pw, c.Repo.Path(c.Line.Image.File), c.Fold, nil, 0)
		pw.CloseWithError(err)
		done <- err
	}()
	tr := tree.NewReader(pr, tree.Limits{})
	var err2 error
	for {
		e, r, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
			break
		}
		if e.Type == manifests.TypeFile {
			e.SHA256 = c.State[e.Path].SHA256
		}
		if err := tree.Create(filepath.Join(dir, filepath.FromSlash(e.Path)), e, r); err != nil {
			err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
			break
		}
	}
	pr.CloseWithError(io.ErrClosedPipe)
	if err := <-done; err2 == nil && err != nil && err != io.ErrClosedPipe {
		err2 = fmt.Errorf("staging line %s: %w", c.Line.Name, err)
	}
	return err2
}

// argvScript is chrootScript's setup with argv run in the tree, never
// through a shell: the words after the root are the command.
var argvScript = strings.Replace(strings.Replace(chrootScript,
	"root=$1\n", "root=$1\nshift\n", 1),
	`chroot "$root" /bin/sh -c "$2"`, `chroot "$root" "$@"`, 1)

// runInTreeTimeout bounds a command RunInTree runs.
const runInTreeTimeout = time.Minute

// RunInTree runs argv (its program an absolute path inside the tree)
// under chroot in the tree at root, as a build's run steps run (its own
// PID, UTS, IPC and mount namespaces, proc, sys and a small dev of its
// own, a reduced capability bounding set) and with a network namespace of
// its own, for at most a minute, and returns its combined output. It is
// still root: the command is the recipe author's, trusted as build steps
// are. The tree is a staged copy the caller discards: nothing is put back.
func RunInTree(ctx context.Context, root string, argv []string) (string, error) {
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		return "", fmt.Errorf("running in %s: %q is not an absolute program path", root, argv)
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := ensureDir(filepath.Join(root, d)); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, runInTreeTimeout)
	defer cancel()
	args := append([]string{"-c", argvScript, "strata-run", root}, argv...)
	cmd := isolated(ctx, "/bin/sh", args...)
	// Unlike a build step, a validation needs no network: it gets a
	// network namespace of its own, with nothing in it.
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	var out []string
	err := runLines(cmd, func(l string) { out = append(out, l) })
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (stopped after %s)", err, runInTreeTimeout)
	}
	return strings.Join(out, "\n"), err
}
