// Package overlay is strata's publisher: it creates overlays against a
// line's head (with restart plans, patches against similar files and the
// signed index that publishes them), previews, reverts and key rotations,
// reads a line's log, and audits repositories. Package node applies what
// it publishes; neither links the other.
//
// An overlay archive is a compressed tar whose first member is the manifest
// (.strata/overlay.json), whose second is its minisign signature, and whose
// remaining members are the payload, one per manifest entry and in the same
// order. Readers verify the signature before trusting the manifest and check
// every payload member against it while streaming.
package overlay
