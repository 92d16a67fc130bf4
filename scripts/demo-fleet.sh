#!/bin/bash
# make demo-fleet: a fleet a newcomer can try on one machine. Three nodes
# of the debian-node image, each a namespaced systemd (PID 1) with sshd,
# nginx and a strata agent (tests/testnode, as the live tests run them),
# walked through the story: config edited centrally and validated, a
# refused edit, a rollout over SSH, a node down, a rollout through the
# agents, a local edit the metrics catch, a hold, a cluster restart with
# repair, and the status page (tests/live/demofleet_test.go). Everything
# it starts stops at the end, also on failure or Ctrl-C. Needs root; the
# first run builds the image (network, a few minutes), then it is cached.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
# The walk prints itself on stdout as it goes; the harness's own log
# lines (image builds, node launches) are left out, the demo's failures
# are not.
$GO test -count=1 -tags 'debian demofleet' -run '^TestDemoFleet$' -timeout 30m -v ./tests/live/ 2>&1 |
	awk '/^(=== RUN|--- PASS|PASS$|ok  )/ { next }
		/^    [a-z_]+\.go:[0-9]+: / && !/^    demofleet_test\.go:/ { skip = 1; next }
		skip && /^        / { next }
		{ skip = 0; print; fflush() }'
