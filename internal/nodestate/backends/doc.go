// Package backends registers every node backend strata has with package
// nodestate: dirfs (a tree changed in place) and overlayfs (layers
// stacked over a read-only image). A program that opens nodes imports it
// for that side effect, as a database/sql program imports its drivers;
// the engine (package node) imports no backend of its own.
package backends
