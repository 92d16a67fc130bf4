// Package tests holds strata's black-box test suite: it builds the real
// strata binary once (go build ./cmd/strata) and drives it from the
// outside, the way an operator or a CI job would, so that flags, output,
// exit codes and os.Exit paths are the real ones.
//
// The suite has three parts:
//
//   - cli_test.go runs the testscript files in testdata/script/*.txtar
//     (github.com/rogpeppe/go-internal/testscript). Each script is a
//     readable walk through one area of the command line: key, build,
//     overlay, apply, verify, regenerate and help. Every script starts in a
//     fresh $WORK holding a copy of images/demo at $WORK/demo (also named
//     by $DEMO) and finds strata on $PATH.
//   - hostile_test.go (TestHostileInputs) is the hostile-input suite:
//     over 60 cases, each on a fresh copy of a provisioned node and
//     repository, attacking signatures, decoders, manifests, payloads,
//     the sequence, the repository's files and the node's state; each
//     checks the exit status, the message, a recursive digest of the node
//     (owners and modes included) and a canary directory outside it.
//   - e2e_test.go (TestEndToEnd) runs the whole demo flow of
//     scripts/demo.sh through os/exec and checks the regenerate
//     equivalence: a node that replayed the overlay chain and a node
//     provisioned from the regenerated image have the same tree digest,
//     which is the last overlay's, and the regenerated node keeps
//     following the line.
//
// Besides testscript's built-in commands, the scripts use four helpers
// defined in cli_test.go:
//
//	exitcode N prog [args...]   run prog and require exit status N
//	jsonfield FILE PATH WANT    require a JSON value (FILE may be stdout)
//	jsonenv VAR FILE PATH       copy a JSON value into $VAR
//	magic FILE FORMAT           require FILE to start with the magic
//	                            bytes of xz, gzip or zstd
//
// The tests need root (images carry files owned by other users) and
// mksquashfs, sqfs2tar, rdsquashfs and minisign on $PATH; TestMain fails
// at once, naming what is missing, rather than skipping. Run them with
//
//	go test ./tests/
//	go test ./tests/ -run 'TestScripts/apply' -v   # one script
//	go test ./tests/ -run TestEndToEnd -v
package tests
