// Package safefile reads files that arrive from outside the process (node
// state, keys, stored manifests) without trusting what they are: a path
// that is a symlink, a FIFO or a device is refused before it is opened for
// reading, and no read goes past a bound the caller sets.
package safefile
