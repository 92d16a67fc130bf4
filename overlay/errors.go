package overlay

import (
	"errors"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package; match them with errors.Is.
var (
	// ErrSequence reports an overlay that does not continue the node's or
	// line's head: a gap, a reorder or a fork.
	ErrSequence = repo.ErrSequence
	// ErrConstraint reports an image constraint the base does not meet.
	ErrConstraint = manifests.ErrConstraint
	// ErrPayload reports payload members that disagree with the manifest.
	ErrPayload = archive.ErrPayload
	// ErrFormat reports an archive that is not a strata overlay.
	ErrFormat = archive.ErrFormat
	// ErrNoBase reports a file shipped as a patch whose base content is
	// not at hand (on a node: the file drifted).
	ErrNoBase = archive.ErrNoBase
	// ErrHeadMoved reports a change made against a head that is no
	// longer the line's (see CreateOptions.Parent).
	ErrHeadMoved = manifests.Rejection("the line's head moved")
	// ErrEmpty reports a change that changes nothing.
	ErrEmpty = manifests.Rejection("empty change")
	// ErrSymlinkPath reports a write through a symlinked directory.
	ErrSymlinkPath = nodestate.ErrSymlinkPath
	// ErrOutsideHierarchies reports a change outside the line's managed
	// hierarchies.
	ErrOutsideHierarchies = manifests.Rejection("change outside the managed hierarchies")
	// ErrAmbiguousLine reports a repository with several lines where the
	// caller named none.
	ErrAmbiguousLine = repo.ErrAmbiguousLine
	// ErrRotation reports a key rotation that cannot be made as asked: a
	// key added twice or trusted already, a revoked key not trusted, no
	// key left, or an index key not trusted after it.
	ErrRotation = errors.New("key rotation refused")
)
