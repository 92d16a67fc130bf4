// Package archive reads strata overlay archives: a compressed tar whose
// first member is the signed manifest (.strata/overlay.json), its minisign
// signature second, then one payload member per manifest entry. Open
// verifies the manifest; Payload streams the members, each checked against
// its entry while it streams. An Archive reopens its bytes through an
// Opener, so it may come from a host file or a repository store alike.
// Writing archives is package overlay's (overlay create).
package archive
