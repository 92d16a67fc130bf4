package manifests

import "errors"

// ErrRejected matches (errors.Is) every error that rejects an input: a bad
// signature, a tampered or out-of-sequence file, an unsafe path, an invalid
// manifest or recipe, an image that does not match its manifest, a disk
// that cannot hold the layout. The sentinels of that class, in every
// package, are made with Rejection; the command maps the class to one exit
// code. Other errors (I/O, missing tools, locks) do not match it.
var ErrRejected = errors.New("rejected")

// Rejection returns a new sentinel error with the given text whose
// errors.Is matches itself (by identity, as errors.New's) and ErrRejected.
// Each call returns a distinct error.
func Rejection(text string) error { return &rejection{text} }

// rejection is an error of the ErrRejected class.
type rejection struct{ text string }

func (e *rejection) Error() string { return e.text }

// Is reports whether target is the class ErrRejected; identity with the
// sentinel itself errors.Is checks before calling Is.
func (e *rejection) Is(target error) bool { return target == ErrRejected }

// Sentinel errors. Callers test for them with errors.Is; all are of the
// ErrRejected class.
var (
	// ErrUnsafePath reports a path that is not a clean, relative path
	// inside the tree (absolute, containing "..", empty elements, NUL).
	ErrUnsafePath = Rejection("unsafe path")
	// ErrInvalid reports a manifest that does not satisfy its schema.
	ErrInvalid = Rejection("invalid manifest")
	// ErrVersion reports a version that is not strict semver or that does
	// not increase along a line.
	ErrVersion = Rejection("bad version")
	// ErrTooLarge reports a document larger than its size limit.
	ErrTooLarge = Rejection("document too large")
	// ErrConstraint reports an overlay's image constraint (requires) that
	// the image does not meet.
	ErrConstraint = Rejection("image constraint not satisfied")
)
