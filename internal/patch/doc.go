// Package patch makes and applies file patches: a new file's content
// compressed as one zstd frame (RFC 8878) with the content it replaces as
// a raw dictionary, what `zstd --patch-from=OLD` writes and reads. An
// overlay ships a large changed file this way when the patch is smaller
// than the content; the node rebuilds the file from the one it has and
// checks the result's SHA-256 before anything changes.
//
// Everything here works in memory: a patch may be made only when both
// contents are at most MaxContent bytes, and applying one never produces
// more bytes than the caller says the result has.
package patch
