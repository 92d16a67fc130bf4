package tree

import (
	"errors"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package. ErrSpecialFile, ErrHardlink,
// ErrDuplicate and ErrLimit reject an input: they are of the
// manifests.ErrRejected class.
var (
	// ErrNotExist reports a path missing from a tree.
	ErrNotExist = errors.New("no such path")
	// ErrNotDir reports a path used as a directory that is not one.
	ErrNotDir = errors.New("not a directory")
	// ErrSpecialFile reports a device node, FIFO or socket.
	ErrSpecialFile = manifests.Rejection("device nodes, FIFOs and sockets are not allowed")
	// ErrHardlink reports a hard link member.
	ErrHardlink = manifests.Rejection("hard links are not allowed")
	// ErrDuplicate reports a path that occurs twice in one stream.
	ErrDuplicate = manifests.Rejection("duplicate entry")
	// ErrLimit reports a stream over its size or count limits.
	ErrLimit = manifests.Rejection("size limit exceeded")
)

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
