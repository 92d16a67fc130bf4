package manifests

import "errors"

// Sentinel errors. Callers test for them with errors.Is.
var (
	// ErrUnsafePath reports a path that is not a clean, relative path
	// inside the tree (absolute, containing "..", empty elements, NUL).
	ErrUnsafePath = errors.New("manifests: unsafe path")
	// ErrInvalid reports a manifest that does not satisfy its schema.
	ErrInvalid = errors.New("manifests: invalid manifest")
	// ErrVersion reports a version that is not strict semver or that does
	// not increase along a line.
	ErrVersion = errors.New("manifests: bad version")
	// ErrTooLarge reports a document larger than its size limit.
	ErrTooLarge = errors.New("manifests: document too large")
)
