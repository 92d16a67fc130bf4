package overlay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// ErrValidation reports a change that a service's validation command
// refused: nothing was signed or written. Nodes report the same value
// (node.ErrValidation) when they refuse an overlay.
var ErrValidation = catalog.ErrValidation

// Validation is what the validation commands of the services a change
// restarts or reloads said of it, in the line's tree with the change in
// place, before anything was signed.
type Validation struct {
	// Validated are the commands that passed, "UNIT: ARGV".
	Validated []string `json:"validated"`
	// Skipped is why none ran (CreateOptions.SkipValidation); the
	// overlay's signed manifest records it.
	Skipped string `json:"skipped,omitempty"`
}

// validationTimeout bounds one validation command, as on a node.
const validationTimeout = time.Minute

// validated remembers, for this process, the changes whose validation
// passed: a preview followed by the create of the same change (config
// set does this) stages the tree once. The key is the tree digest after
// the change, which covers every file's content, owner and mode, and the
// commands run; the same key means the same commands ran on the same tree.
var validated sync.Map // key -> []string

// validateChange runs, in a sandbox rooted at the line's tree with m in
// place, the validation command of every service m's plan restarts or
// reloads (see catalog.ValidationsFor), or records why not
// (o.SkipValidation). c is the line at its head; open gives the content
// of m's file entries. A refusal is ErrValidation with the command's
// output.
func validateChange(ctx context.Context, c *Chain, m *manifests.OverlayManifest, open tree.Opener, o CreateOptions) (*Validation, error) {
	if o.SkipValidation != "" {
		return &Validation{Validated: []string{}, Skipped: o.SkipValidation}, nil
	}
	cat := c.Catalog
	if m.Catalog != nil {
		cat = *m.Catalog
	}
	cmds := catalog.ValidationsFor(cat, m.Services)
	v := &Validation{Validated: []string{}}
	if len(cmds) == 0 {
		return v, nil
	}
	key := validationKey(m.TreeDigest, cmds)
	if done, ok := validated.Load(key); ok {
		v.Validated = done.([]string)
		return v, nil
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	progress(fmt.Sprintf("staging the tree of %s %s with the change, to validate it", c.Line.Name, o.Version))
	dir, err := stageForValidation(ctx, c, m, open)
	if dir != nil {
		defer dir.RemoveAll()
	}
	if err != nil {
		return nil, fmt.Errorf("validating overlay %s: %w", o.Version, err)
	}
	for _, cmd := range cmds {
		argv := strings.Join(cmd.Argv, " ")
		progress(fmt.Sprintf("validating %s: %s", cmd.Unit, argv))
		out, err := sandbox.Run(ctx, sandbox.Spec{Root: dir.Path, Argv: cmd.Argv, FileCaps: true, Timeout: validationTimeout})
		if err != nil {
			if errors.Is(err, sandbox.ErrSandbox) && os.Geteuid() != 0 {
				return nil, fmt.Errorf("validating overlay %s: %s: %w (the sandbox validation runs in needs root: publish as root, or with --skip-validation REASON)", o.Version, cmd.Unit, err)
			}
			return nil, fmt.Errorf("overlay %s %w: %s refuses the change (fix it and publish again, or publish it as it is with --skip-validation REASON, which is signed into the overlay; nodes validate all the same): %s",
				o.Version, ErrValidation, cmd.Unit, catalog.Outcome(cmd.Argv, err, out))
		}
		v.Validated = append(v.Validated, cmd.Unit+": "+argv)
	}
	validated.Store(key, v.Validated)
	return v, nil
}

// validationKey identifies a validation: the tree it ran on and the
// commands.
func validationKey(treeDigest string, cmds []catalog.Validation) string {
	h := sha256.New()
	io.WriteString(h, treeDigest)
	for _, c := range cmds {
		fmt.Fprintf(h, "\x00%s", c.Unit)
		for _, a := range c.Argv {
			fmt.Fprintf(h, "\x01%s", a)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// stageForValidation unpacks the line's tree at c's head into a scratch
// directory (from the whole chain: a chain from the head state holds no
// payloads) and puts m's deletes and entries in place.
func stageForValidation(ctx context.Context, c *Chain, m *manifests.OverlayManifest, open tree.Opener) (*scratch.Dir, error) {
	full, err := repo.LoadChain(ctx, c.Repo, c.Line.Name, "", nil)
	if err != nil {
		return nil, err
	}
	if full.Head() != c.Head() {
		return nil, fmt.Errorf("line %s: the head moved from %s to %s while validating: %w", c.Line.Name, c.Head().Version, full.Head().Version, ErrHeadMoved)
	}
	dir, err := scratch.MkdirTemp("validate")
	if err != nil {
		return nil, err
	}
	if err := builder.Stage(ctx, full, dir.Path); err != nil {
		return dir, err
	}
	return dir, stageChange(dir.Path, m, open)
}

// stageChange puts m's deletes and entries into the tree at dir. Every
// path is reached beneath dir without following a symbolic link: the
// staged tree is the line's, and a link in it (an absolute one, say) must
// not lead a write onto the host.
func stageChange(dir string, m *manifests.OverlayManifest, open tree.Opener) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range m.Deletes {
		if err := root.RemoveAll(d); err != nil {
			return fmt.Errorf("staging the delete of /%s: %w", d, err)
		}
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	for _, e := range m.Entries {
		if err := stageEntry(root, dfd, e, open); err != nil {
			return fmt.Errorf("staging /%s: %w", e.Path, err)
		}
	}
	return nil
}

// stageEntry puts entry e in place below the directory open as dfd (root
// is the same directory), replacing what is there; a directory that
// stays one only takes e's owner and mode.
func stageEntry(root *os.Root, dfd int, e manifests.Entry, open tree.Opener) error {
	parent, base := path.Split(e.Path)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	pfd, err := safefile.OpenDirBeneath(dfd, parent)
	if err != nil {
		return fmt.Errorf("its directory: %w", err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && e.Type == manifests.TypeDir:
		return tree.SetMetaAt(pfd, base, e)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		if err := root.RemoveAll(e.Path); err != nil {
			return err
		}
	case err == nil:
		if err := unix.Unlinkat(pfd, base, 0); err != nil {
			return err
		}
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	var r io.Reader
	if e.Type == manifests.TypeFile {
		rc, err := open(e)
		if err != nil {
			return err
		}
		defer rc.Close()
		r = rc
	}
	return tree.CreateAt(pfd, base, e, r)
}
