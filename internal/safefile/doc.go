// Package safefile handles files that arrive from outside the process
// (node state, keys, stored manifests) without trusting what they are: a
// path that is a symlink, a FIFO or a device is refused before it is
// opened for reading, and no read goes past a bound the caller sets. It
// also writes such files durably (WriteAtomic, SyncDir, SyncFS), takes
// the exclusive file locks strata's node and repository locks are made
// of (Lock), and makes temporary directories and parents beneath a root
// without following links.
package safefile
