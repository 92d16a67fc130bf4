// Package compress picks the stream compression of overlay archives and
// tarballs: zstd (default), xz or gzip when writing, detected from the
// magic bytes when reading.
package compress
