// Package layering holds no code. Its test checks the import rules
// between strata's packages that keep the seams where docs/code-map.md
// draws them: the fleet client links no agent; the node engine no
// concrete node backend and not the publisher; the publisher not the
// engine.
package layering
