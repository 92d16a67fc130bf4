// Command strata builds read-only root images, ships signed overlays,
// applies them to nodes in order and audits the result. Run `strata --help`
// for the commands and exit codes; docs/cli.md has the full reference.
//
// This package only parses flags and calls the library (builder, overlay,
// internal/repo); it decides exit codes and prints, nothing else.
package main
