// Package catalog builds the service catalog of a root tree and plans the
// service restarts a set of changed paths calls for.
//
// [Build] scans the systemd unit directories of a tree (an [io/fs.FS] rooted
// at the tree's root), parses each unit's effective definition and drop-ins,
// and records every path whose change affects the unit: its unit files, the
// programs its Exec lines run (following symlinks and script interpreters),
// the shared libraries those programs load (ELF DT_NEEDED and PT_INTERP,
// resolved transitively the way the dynamic loader would inside the tree)
// and the paths declared by recipes or by X-Strata-Paths= and
// X-Strata-Reload-Paths= keys in the unit files.
//
// Symbolic links are resolved inside the tree the way chroot does: absolute
// targets are relative to the tree root, ".." stops at the root, and more
// than 40 links in one lookup is an error ([ErrSymlinkLoop]). The host file
// system is never consulted, even when the tree is an [os.DirFS].
//
// [Plan] maps changed paths onto the catalog: a changed unit file means
// daemon-reload and restart, a changed program, library or declared path
// means restart, a changed reload path means reload.
//
// The package performs no output; it reads only the file system handed to
// it.
package catalog

import (
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Sentinel errors. Callers test for them with errors.Is; all are of the
// manifests.ErrRejected class.
var (
	// ErrSymlinkLoop reports a path whose resolution follows more than 40
	// symbolic links.
	ErrSymlinkLoop = tree.ErrSymlinkLoop
	// ErrUnknownUnit reports a declared path for a unit the tree does not
	// define.
	ErrUnknownUnit = manifests.Rejection("unknown unit")
	// ErrBadPath reports a declared path that is not a clean tree path, or
	// an X-Strata path that is not absolute.
	ErrBadPath = manifests.Rejection("bad declared path")
)
