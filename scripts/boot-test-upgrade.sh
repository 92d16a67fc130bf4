#!/usr/bin/env bash
# Whole-image upgrade boot test: disk nodes of images/debian-bootable,
# booted under qemu-system-x86_64 + OVMF (software emulation: slow), taken
# through `strata upgrade` on real systemd-boot boot counting and
# systemd-bless-boot. A reboot inside a node is a power cycle of its qemu
# (scripts/boot-lib.sh, start_qemu).
#
# Node up1, provisioned at image 1.0.0 with overlays 1.0.1-1.0.3 applied
# offline:
#  1. upgraded offline (`upgrade --disk`, one try) to image 1.2.0, whose
#     enabled strata-broken.service fails: the trial boot on root B fails
#     the health check (strata-upgrade-confirm.service) and reboots, the
#     entry has no try left, the firmware boots root A again, and boot
#     activation records the failed upgrade: `strata status` names it,
#     the head is still 1.0.3;
#  2. then upgraded live over SSH (`upgrade --root / --repo`, from a copy of
#     the repository on a second disk, where `repo add-image` published it)
#     to image 1.1.0, a recipe change (/etc/strata-release): it boots root B
#     with the three layers stacked above 1.1.0, confirms, the entry is
#     blessed, `verify-sequence --files` passes.
# Node up2, the same at 1.0.3, offline compacted (`upgrade --disk
# --compact --repo`) onto `strata regenerate --through 1.0.3`, published
# with `repo add-image`:
#  3. it boots root B with no layer stacked and the tree digest it had,
#     the entry is blessed, and overlay 1.0.4 rolls out (`strata rollout`).
#
#   scripts/boot-test-upgrade.sh [STRATA_BIN]
#
# Needs root and, on the first run, network (debootstrap, apt-get; cached in
# $STRATA_CACHE, default /var/cache/strata-test). Work files go to
# $BOOT_WORK (default: a fresh temporary directory, removed on success).
# $BOOT_TIMEOUT bounds each wait for the node in seconds (default 900).
set -euo pipefail

BIN=$(realpath "${1:-bin/strata}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export STRATA_CACHE=${STRATA_CACHE:-/var/cache/strata-test}
TIMEOUT=${BOOT_TIMEOUT:-900}
WORK=${BOOT_WORK:-$(mktemp -d /tmp/strata-upgrade.XXXXXX)}
mkdir -p "$WORK"
. "$ROOT/scripts/boot-lib.sh"
boot_deps
trap stop_qemu EXIT
RECIPE=$ROOT/images/debian-bootable/recipe.yaml
MARK=1

fail() {
	echo "FAIL: $*"
	echo "-- console (strata, failures):"
	console | grep -aE '\[FAILED\]|FAILED|Kernel panic|strata: |strata\[|STRATA-|bless' | tail -n 60 || true
	echo "-- last lines:"
	console | tail -n 30
	exit 1
}

# mark starts a phase: wait_for looks at the console after it.
mark() { MARK=$(($(console | wc -l) + 1)); }

# wait_for WHAT TEXT...: waits until the console since the mark has every
# TEXT (fixed strings).
wait_for() {
	local what=$1 deadline=$(($(date +%s) + TIMEOUT)) text p ok
	shift
	while :; do
		text=$(console | tail -n +"$MARK")
		ok=1
		for p in "$@"; do
			grep -aqF -- "$p" <<<"$text" || { ok=0; break; }
		done
		[ $ok = 1 ] && return 0
		grep -aq 'Kernel panic' <<<"$text" && fail "$what: kernel panic"
		kill -0 "$QEMU_PID" 2>/dev/null || fail "$what: the VM stopped"
		[ "$(date +%s)" -lt "$deadline" ] || fail "$what: no \"$p\" on the console after ${TIMEOUT}s"
		sleep 5
	done
}

# no_failure WHAT: no unit failed since the mark.
no_failure() {
	if console | tail -n +"$MARK" | grep -aE '\[FAILED\]|FAILED:'; then
		fail "$1: a unit failed"
	fi
}

on_node() {
	ssh -q -i "$WORK/id" -o UserKnownHostsFile="$WORK/known_hosts" -o StrictHostKeyChecking=yes \
		-o BatchMode=yes -o ConnectTimeout=30 -p "$SSH_PORT" root@127.0.0.1 "$@"
}

# ssh_up waits for the node's sshd, with the host key its check unit
# printed on the console.
ssh_up() {
	local key deadline=$(($(date +%s) + TIMEOUT))
	key=$(console | sed -n 's/.*STRATA-HOSTKEY \(ssh-ed25519 [A-Za-z0-9+/=]*\).*/\1/p' | tail -n1)
	[ -n "$key" ] || fail "no host key on the console"
	printf '[127.0.0.1]:%s %s\n' "$SSH_PORT" "$key" >"$WORK/known_hosts"
	until on_node true; do
		[ "$(date +%s)" -lt "$deadline" ] || fail "no SSH to the node"
		sleep 5
	done
}

# json_field NAME reads "NAME": "VALUE" from stdin (the first).
json_field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -n1; }

# variant VERSION FILE: the recipe at VERSION, with the steps in FILE
# appended (after the cached run steps, so the build reuses them).
variant() {
	local dir=$WORK/recipe-$1
	mkdir -p "$dir"
	awk -v extra="$2" '/^services:/ { while ((getline l < extra) > 0) print l } { print }' "$RECIPE" |
		sed "s/^version: 1.0.0\$/version: $1/" >"$dir/recipe.yaml"
	echo "$dir/recipe.yaml"
}

t0=$(date +%s)
echo "== build 1.0.0, 1.1.0, 1.2.0 (work dir $WORK)"
[ -f "$WORK/k.key" ] || "$BIN" key generate --out "$WORK/k"
rm -rf "$WORK/out" "$WORK/ship" "$WORK/regen"
cat >"$WORK/steps-1.1.0" <<'EOF'
  - copy:
      path: /etc/strata-release
      content: "1.1.0\n"
EOF
cat >"$WORK/steps-1.2.0" <<'EOF'
  - copy:
      path: /etc/strata-release
      content: "1.2.0\n"
  - copy:
      path: /etc/systemd/system/strata-broken.service
      content: |
        [Unit]
        Description=strata upgrade test: a service that fails (image 1.2.0)

        [Service]
        Type=oneshot
        ExecStart=/bin/false

        [Install]
        WantedBy=multi-user.target
  - copy:
      path: /etc/systemd/system/multi-user.target.wants/strata-broken.service
      symlink: /etc/systemd/system/strata-broken.service
EOF
"$BIN" build-image "$RECIPE" --out "$WORK/out/1.0.0" --key "$WORK/k.key"
"$BIN" build-image "$(variant 1.1.0 "$WORK/steps-1.1.0")" --out "$WORK/ship/v1.1.0" --key "$WORK/k.key"
"$BIN" build-image "$(variant 1.2.0 "$WORK/steps-1.2.0")" --out "$WORK/out/1.2.0" --key "$WORK/k.key"
IMAGE=$(ls "$WORK"/out/1.0.0/*.squashfs)
BAD=$(ls "$WORK"/out/1.2.0/*.squashfs)
grep -q '"strata-broken.service"' "${BAD%.squashfs}.image.json" || fail "image 1.2.0's catalog lacks strata-broken.service"
t1=$(date +%s)

echo "== overlays 1.0.1-1.0.3; nodes up1 (upgrade --disk to 1.2.0, 1 try) and up2 (upgrade --disk --compact)"
rm -f "$WORK"/disk*.img "$WORK/id" "$WORK/id.pub"
ssh-keygen -q -t ed25519 -N "" -C strata-upgrade-test -f "$WORK/id"
REPO=$WORK/repo OV=$WORK/ov
rm -rf "$REPO" "$OV"
mkdir -p "$OV/wants"
"$BIN" repo init "$REPO" --image "$IMAGE" --key "$WORK/k.key"
# The check unit (1.0.1) reports what each boot sees.
cat >"$OV/check.service" <<'UNIT'
[Unit]
Description=strata upgrade check: what this boot runs
After=multi-user.target ssh.service

[Service]
Type=oneshot
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/libexec/strata-upgrade-check

[Install]
WantedBy=multi-user.target
UNIT
cat >"$OV/check.sh" <<'SCRIPT'
#!/bin/sh
echo "STRATA-HOSTKEY $(cat /var/lib/ssh/ssh_host_ed25519_key.pub)"
root=$(findmnt -no SOURCE /)
echo "STRATA-UPGRADE-CHECK release=$(cat /etc/strata-release 2>/dev/null || echo 1.0.0) etc=[$(cat /etc/strata-boot-check)] stacks=$(findmnt -n -t overlay | wc -l) root=$(lsblk -no PARTLABEL "$root")"
SCRIPT
chmod 0755 "$OV/check.sh"
ln -s /etc/systemd/system/strata-upgrade-check.service "$OV/wants/strata-upgrade-check.service"
for v in 1.0.1 1.0.2 1.0.3 1.0.4; do printf 'layer %s\n' "$v" >"$OV/etc-$v"; done
"$BIN" overlay create --repo "$REPO" --version 1.0.1 --key "$WORK/k.key" \
	--add /etc/strata-boot-check="$OV/etc-1.0.1" \
	--add /etc/systemd/system/strata-upgrade-check.service="$OV/check.service" \
	--add /etc/systemd/system/multi-user.target.wants="$OV/wants" \
	--add /usr/libexec/strata-upgrade-check="$OV/check.sh"
"$BIN" overlay create --repo "$REPO" --version 1.0.2 --key "$WORK/k.key" --add /etc/strata-boot-check="$OV/etc-1.0.2"
"$BIN" overlay create --repo "$REPO" --version 1.0.3 --key "$WORK/k.key" --add /etc/strata-boot-check="$OV/etc-1.0.3"
for n in 1 2; do
	"$BIN" provision --image "$IMAGE" --disk "$WORK/disk$n.img" --size 4G --node-id "up$n" --hostname "strata-up$n" \
		--ssh-authorized-key "$WORK/id.pub"
	"$BIN" apply-overlay --disk "$WORK/disk$n.img" --repo "$REPO"
done
"$BIN" upgrade --disk "$WORK/disk1.img" --image "$BAD" --tries 1
TREE2=$("$BIN" verify-sequence --disk "$WORK/disk2.img" --json | json_field tree_digest)
[ -n "$TREE2" ] || fail "no tree digest for up2"
# Both upgrade images are published in the repository (repo add-image) and
# taken from it (upgrade --repo): the regenerated one offline by up2, 1.1.0
# live by up1 from a copy of the repository on a second disk it mounts.
"$BIN" regenerate --repo "$REPO" --through 1.0.3 --out "$WORK/regen" --key "$WORK/k.key"
"$BIN" repo add-image "$REPO" --image "$(ls "$WORK"/regen/*.squashfs)" --key "$WORK/k.key"
"$BIN" repo add-image "$REPO" --image "$(ls "$WORK"/ship/v1.1.0/*.squashfs)" --key "$WORK/k.key"
"$BIN" verify-sequence --repo "$REPO" >/dev/null || fail "verify-sequence --repo with upgrade images"
"$BIN" upgrade --disk "$WORK/disk2.img" --compact --repo "$REPO"
rm -rf "$WORK/shiprepo" "$WORK/ship.img"
mkdir -p "$WORK/shiprepo"
cp -a "$REPO" "$WORK/shiprepo/repo"
truncate -s 2G "$WORK/ship.img"
mkfs.ext4 -q -F -L strata-images -d "$WORK/shiprepo" "$WORK/ship.img"
t2=$(date +%s)

# boot DISK...: a fresh firmware, a free port, qemu.
boot() {
	stop_qemu
	cp /usr/share/OVMF/OVMF_VARS.fd "$WORK/vars.fd"
	free_port
	MARK=1
	start_qemu "$@"
	echo "   (console in $LOG; sshd on 127.0.0.1:$SSH_PORT)"
}

# blessed ENTRY: the node's ESP has ENTRY without a boot counter.
blessed() {
	local entries
	for _ in 1 2 3 4 5 6; do
		entries=$(on_node ls /efi/loader/entries)
		grep -qx "$1" <<<"$entries" && return 0
		sleep 10
	done
	fail "entry $1 is not blessed: $(tr '\n' ' ' <<<"$entries")"
}

echo "== 1. up1: the trial boot of 1.2.0 on root B fails, root A boots again"
boot "$WORK/disk1.img" "$WORK/ship.img"
wait_for "trial boot of 1.2.0" 'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' 'trial boot of image 1.2.0' \
	'strata-broken.service failed' 'reboot: Restarting system'
mark
wait_for "fallback to root A" 'upgrade failed, recorded: upgrade to image 1.2.0 (root b, boot entry strata-2-b.conf) did not boot to health' \
	'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=2 root=rootA'
no_failure "fallback boot"
ssh_up
st=$(on_node strata status --root /)
echo "$st"
grep -q '^failed    upgrade to image 1.2.0 ' <<<"$st" || fail "status does not name the failed upgrade"
grep -q '^head      1.0.3 ' <<<"$st" && grep -q '^layers    1.0.1 1.0.2 1.0.3$' <<<"$st" || fail "the head or the layers moved"
on_node strata verify-sequence --root / >/dev/null || fail "verify-sequence after the fallback"
t3=$(date +%s)

echo "== 2. up1: upgrade to image 1.1.0, live"
on_node "mkdir -p /run/images && mount -o ro LABEL=strata-images /run/images && strata upgrade --root / --repo /run/images/repo"
! on_node 'ls -d /var/tmp/strata-upgrade-*' >/dev/null 2>&1 || fail "upgrade --repo left its copy of the image in /var/tmp"
on_node strata status --root / | grep -q '^upgrade   staged: image 1.1.0 on root B' || fail "status shows no staged upgrade"
mark
on_node systemctl reboot || true
wait_for "trial boot of 1.1.0" 'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' 'trial boot of image 1.1.0' \
	'upgrade to image 1.1.0 confirmed: node / healthy, at 1.0.3' 'STRATA-UPGRADE-CHECK release=1.1.0 etc=[layer 1.0.3] stacks=2 root=rootB'
no_failure "1.1.0 boot"
ssh_up
on_node strata verify-sequence --root / --files || fail "verify-sequence --files on 1.1.0"
st=$(on_node strata status --root /)
echo "$st"
grep -q '^running   image 1.1.0 on root B ' <<<"$st" && grep -q '^layers    1.0.1 1.0.2 1.0.3$' <<<"$st" &&
	! grep -q '^upgrade ' <<<"$st" || fail "status on 1.1.0"
blessed strata-3-b.conf
t4=$(date +%s)

echo "== 3. up2: compacted onto the regenerated image"
boot "$WORK/disk2.img"
wait_for "trial boot of the regenerated image" 'strata: activated /root at 1.0.3 (layers: none)' 'trial boot of image' \
	'confirmed: node / healthy, at 1.0.3' 'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=0 root=rootB'
no_failure "compaction boot"
ssh_up
got=$(on_node strata verify-sequence --root / --files --json | json_field tree_digest)
[ "$got" = "$TREE2" ] || fail "tree after compaction $got, before $TREE2"
blessed strata-2-b.conf
"$BIN" overlay create --repo "$REPO" --version 1.0.4 --key "$WORK/k.key" --add /etc/strata-boot-check="$OV/etc-1.0.4"
printf 'nodes:\n  - name: up2\n    address: 127.0.0.1:%s\n    user: root\n' "$SSH_PORT" >"$WORK/inventory.yaml"
"$BIN" rollout --inventory "$WORK/inventory.yaml" --repo "$REPO" --known-hosts "$WORK/known_hosts" --identity "$WORK/id" \
	--ssh-timeout 60s --health-timeout 10m || fail "rollout of 1.0.4 after compaction"
st=$(on_node strata status --root /)
echo "$st"
grep -q '^head      1.0.4 ' <<<"$st" && grep -q '^layers    1.0.4$' <<<"$st" || fail "status after the rollout"
[ "$(on_node cat /etc/strata-boot-check)" = "layer 1.0.4" ] || fail "1.0.4 not in effect"
t5=$(date +%s)
stop_qemu

echo "== timings: builds $((t1 - t0))s, disks $((t2 - t1))s, failed trial and fallback $((t3 - t2))s, upgrade $((t4 - t3))s, compaction $((t5 - t4))s"
echo "PASS: up1: the failed trial of 1.2.0 fell back to root A (recorded, head 1.0.3), then 1.1.0 on root B with layers 1.0.1-1.0.3, verify-sequence --files OK, blessed; up2: compacted onto root B (no layers, tree $TREE2, blessed), 1.0.4 rolled out"
[ -n "${BOOT_WORK:-}" ] || rm -rf "$WORK"
