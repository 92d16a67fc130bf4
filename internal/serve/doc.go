// Package serve serves a strata repository over HTTP, read-only, for
// tests and small sites (larger ones put the same directory behind any web
// server or CDN: a repository is static files). Members are opened as the
// repository's own DirStore opens them, beneath the directory and never
// through a symlink, a FIFO or a device; responses carry ETag and
// Last-Modified and honour conditional and range requests, so a node's
// poll of an unchanged index costs one 304.
package serve
