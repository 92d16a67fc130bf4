package tree

import (
	"errors"
	"time"
)

// Errors reported by this package.
var (
	// ErrNotExist reports a path missing from a tree.
	ErrNotExist = errors.New("tree: no such path")
	// ErrNotDir reports a path used as a directory that is not one.
	ErrNotDir = errors.New("tree: not a directory")
	// ErrSpecialFile reports a device node, FIFO or socket.
	ErrSpecialFile = errors.New("tree: device nodes, FIFOs and sockets are not allowed")
	// ErrHardlink reports a hard link member.
	ErrHardlink = errors.New("tree: hard links are not allowed")
	// ErrDuplicate reports a path that occurs twice in one stream.
	ErrDuplicate = errors.New("tree: duplicate entry")
	// ErrLimit reports a stream over its size or count limits.
	ErrLimit = errors.New("tree: size limit exceeded")
)

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
