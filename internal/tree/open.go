package tree

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openNoFollow opens root/rel for reading without following a symlink in
// any component below root, so a tree cannot redirect reads outside itself.
func openNoFollow(root, rel string) (io.ReadCloser, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(parts)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(fd, part, flags, 0)
		unix.Close(fd)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: filepath.Join(root, rel), Err: fmt.Errorf("component %q: %w", part, err)}
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}
