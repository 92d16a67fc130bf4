package sandbox

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StackAt mounts, in the calling thread's private mount namespace (see
// Private), a read-only overlay of lowers (the first on top) at target,
// for a caller that shows a sandbox a tree with a change laid over it
// before RunHere. Lower directories may hold overlayfs whiteouts and
// opaque directories. Each lower must be an absolute path without ':',
// ',', '\' or a newline, which the overlay's options cannot carry.
func StackAt(target string, lowers ...string) error {
	if len(lowers) < 2 {
		return fmt.Errorf("%w: stacking %s: an overlay needs two lower directories", ErrSandbox, target)
	}
	for _, l := range lowers {
		if !filepath.IsAbs(l) || strings.ContainsAny(l, ":,\\\n") {
			return fmt.Errorf("%w: stacking %s: lower %q is not an absolute path or has a character overlay options cannot carry", ErrSandbox, target, l)
		}
	}
	fd, err := newMount("overlay", map[string]string{"source": "strata", "lowerdir": strings.Join(lowers, ":")}, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("%w: stacking %s: %w", ErrSandbox, target, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: mounting the stack on %s: %w", ErrSandbox, target, err)
	}
	return nil
}
