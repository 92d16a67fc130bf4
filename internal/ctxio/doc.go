// Package ctxio makes long reads honour cancellation: a copy of a large
// image, archive or download through a Reader from this package stops
// within one read once its context is done, returning the context's
// error, so SIGINT and SIGTERM end a command promptly and its deferred
// cleanup runs.
package ctxio
