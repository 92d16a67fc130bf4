// Package live holds the live-node scenarios: overlays applied by strata
// inside running test nodes (tests/testnode: the debian-node image as a
// read-only root, real systemd as PID 1, layers stacked by strata
// activate), checked against what systemd says about every unit. The
// tests carry the debian build tag, like the other tests that need the
// Debian image.
package live
