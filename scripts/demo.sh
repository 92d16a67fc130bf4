#!/usr/bin/env bash
# The main job on the demo image: build an image, start a repository,
# create three overlays, provision a directory node, apply, verify,
# regenerate, provision a second node from the regenerated image, roll
# back and catch up, revert an overlay, and show the repository's log and
# the node's history.
set -euo pipefail
S=$(realpath "${1:-bin/strata}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$ROOT/demo-out
rm -rf "$W" && mkdir -p "$W" && cd "$W"
if [ -t 1 ]; then
	step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	step() { printf '\n== %s\n' "$*"; }
fi
log="$W/restarts.log"

step "generate a signing key"
$S key generate --out demo

step "build the demo image (twice: the builds must be byte-identical)"
$S build-image "$ROOT/images/demo/recipe.yaml" --out images --key demo.key
$S build-image "$ROOT/images/demo/recipe.yaml" --out images-again --key demo.key >/dev/null 2>&1
cmp images/demo-1.0.0.squashfs images-again/demo-1.0.0.squashfs
echo "reproducible: $(sha256sum images/demo-1.0.0.squashfs | cut -c1-16)… twice"

step "start a repository at the image"
$S repo init repo --image images/demo-1.0.0.squashfs --key demo.key

step "overlay 1.0.1: new web config (restarts demo-web)"
printf 'listen 8081\nroot /usr/share/demo/www\n' > web.conf
$S overlay create --repo repo --version 1.0.1 --key demo.key --add /etc/demo/web.conf=web.conf

step "overlay 1.0.2: a reload-only config drop-in and a file nobody claims"
printf 'brotli on\n' > brotli.conf
printf 'demo-node-7\n' > hostname
$S overlay create --repo repo --version 1.0.2 --key demo.key \
	--add /etc/demo/web.d/brotli.conf=brotli.conf --add /etc/hostname=hostname

step "overlay 1.1.0: a changed unit file (daemon-reload + restart) and a deletion"
mkdir -p tree/usr/lib/systemd/system
cp "$ROOT/images/demo/rootfs/usr/lib/systemd/system/demo-worker.service" tree/usr/lib/systemd/system/
sed -i 's|^ExecStart=.*|ExecStart=/usr/libexec/demo/worker --batch 64|' tree/usr/lib/systemd/system/demo-worker.service
$S overlay create --repo repo --version 1.1.0 --key demo.key --tree tree --delete /etc/demo/metrics.conf

step "inspect the last overlay"
$S overlay inspect repo/overlays/demo-1.1.0.overlay.tar.zst --pub demo.pub

step "provision a directory node from the image"
$S provision --image images/demo-1.0.0.squashfs --root node-a

step "a gap is refused before anything changes (exit 3)"
$S provision --image images/demo-1.0.0.squashfs --root node-gap >/dev/null 2>&1
if $S apply-overlay --root node-gap repo/overlays/demo-1.1.0.overlay.tar.zst; then
	echo "BUG: a gap was accepted" >&2; exit 1
else
	echo "refused with exit $?"
fi

step "dry run: what would apply"
$S apply-overlay --root node-a --repo repo --dry-run

step "apply every pending overlay, restarting through a logging command"
$S apply-overlay --root node-a --repo repo --restart-with "exec:echo {action} {unit} >> $log"
echo "restart commands run:"; sed 's/^/  /' "$log"

step "audit the node against the repository, file by file"
$S verify-sequence --root node-a --repo repo --files

step "audit the repository"
$S verify-sequence --repo repo --pub demo.pub

step "regenerate an image with the chain folded in"
$S regenerate --repo repo --out images --key demo.key

step "provision a new machine from it: it joins the line at the head"
$S provision --image "images/demo-1.0.0+head.1.1.0.squashfs" --root node-b
a=$($S verify-sequence --root node-a --files --json | grep -m1 '"tree_digest"')
b=$($S verify-sequence --root node-b --files --json | grep -m1 '"tree_digest"')
echo "node-a $a"; echo "node-b $b"
[ "$a" = "$b" ] && echo "same tree digest: replaying the chain and regenerating agree"

step "final audit of the new node"
$S verify-sequence --root node-b --repo repo --files

step "roll node-a back one overlay, then catch up again"
$S rollback --root node-a --restart-with "exec:echo {action} {unit} >> $log"
$S apply-overlay --root node-a --repo repo --restart-with "exec:echo {action} {unit} >> $log"
$S verify-sequence --root node-a --repo repo --files --strict

step "withdraw a bad overlay: 1.0.2 is reverted by the next one, 1.1.1 (history is never rewritten)"
$S overlay revert --repo repo 1.0.2 --key demo.key
$S apply-overlay --root node-a --repo repo --restart-with "exec:echo {action} {unit} >> $log"
[ ! -e node-a/etc/demo/web.d/brotli.conf ] && echo "node-a: /etc/demo/web.d/brotli.conf is gone again"

step "the repository's log: every line, image and overlay, oldest first"
$S repo log repo

step "node-a's history: what its ledger records"
$S node history --root node-a

# A live node: the debian-node image booted read-only with real systemd as
# PID 1 in namespaces of its own (tests/testnode), its layers stacked by
# strata activate; an nginx config overlay applied inside it. The first run
# on a machine builds the image (network, a few minutes); then it is cached.
step "a live node: debian-node with real systemd, an nginx config overlay applied inside it"
cd "$ROOT"
go test -tags debian -count=1 -v -run '^TestNginxConfigReloads$' ./tests/live/ 2>&1 |
	sed -n '/inside the node:/,/^--- /p' | sed -e 's/^    [a-z_]*_test.go:[0-9]*: //' -e 's/^        //' | grep -v '^--- '
