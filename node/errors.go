package node

import (
	"errors"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package; match them with errors.Is. Those a
// publisher reports too (package overlay) are the same values there.
var (
	// ErrSequence reports an overlay that does not continue the node's
	// head: a gap, a reorder or a fork.
	ErrSequence = repo.ErrSequence
	// ErrConstraint reports an image constraint the node's image does not
	// meet.
	ErrConstraint = manifests.ErrConstraint
	// ErrPayload reports payload members that disagree with the manifest.
	ErrPayload = archive.ErrPayload
	// ErrDrift reports a node whose tree or ledger differs from what it
	// should be.
	ErrDrift = nodestate.ErrDrift
	// ErrInterrupted reports a node with a transaction a crash
	// interrupted, which a check that may not write cannot settle (it
	// comes with ErrDrift).
	ErrInterrupted = errors.New("an interrupted transaction to settle")
	// ErrNothingToRollback reports a node with no applied overlay.
	ErrNothingToRollback = errors.New("nothing to roll back")
	// ErrRollbackTarget reports a rollback --to version that is neither
	// the node's starting point nor an overlay it applied below its head.
	ErrRollbackTarget = errors.New("not a version the node can roll back to")
	// ErrValidation reports a service whose validation command refused a
	// changed configuration; the node did not change. Publishers refuse
	// with the same value (overlay.ErrValidation).
	ErrValidation = catalog.ErrValidation
	// ErrRestart reports a failed service restart (the overlay was rolled
	// back).
	ErrRestart = errors.New("service restart failed")
	// ErrUnknownUnit reports a unit the node's catalog does not have.
	ErrUnknownUnit = catalog.ErrNotInCatalog
)
