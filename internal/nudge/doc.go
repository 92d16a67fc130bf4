// Package nudge is the signed message that makes strata agents poll at
// once: a line, a time, and a minisign signature over both by a key the
// agents' nodes trust. Agents take a nudge only when it verifies with
// their node's keys, names their line, is fresh and newer than the last
// they took; strata serve relays nudges the repository's head keys
// verify to the agents waiting on it.
package nudge
