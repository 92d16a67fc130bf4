#!/usr/bin/env bash
# Boot test: build images/debian-bootable, provision a GPT disk from it,
# create three overlays for its line and apply them to the disk offline
# (`apply-overlay --disk`, then `verify-sequence --disk --files`), boot it
# with qemu-system-x86_64 + OVMF (software emulation: slow) and read over
# the serial console that the initramfs stacked the three layers (`strata
# activate`), that the node reached multi-user.target, that
# strata-verify.service (`strata verify-sequence --root /`) passed, and
# that a unit the first overlay adds sees every layer in effect (a file
# under /etc changed by each overlay, a file under /usr, a deleted
# /etc/motd, /var and /state mounted once, /state nodev and nosuid) and
# passes `strata verify-sequence --root / --files` with the tree digest of
# 1.0.3. A second disk carries a decoy partition labelled `state`, which
# boot activation must leave alone. Then, over SSH to the booted node
# (qemu's user network forwards a loopback port to its sshd; its host key,
# made at first boot, is read from the console; root's key was given at
# provisioning): `strata status --inventory` finds it at the head,
# `strata rollout` brings it to a fourth overlay, and status agrees.
#
#   scripts/boot-test.sh [STRATA_BIN]
#
# Needs root and, on the first run, network (debootstrap, apt-get; cached in
# $STRATA_CACHE, default /var/cache/strata-test). Work files go to
# $BOOT_WORK (default: a fresh temporary directory, removed on success).
# $BOOT_TIMEOUT bounds the boot in seconds (default 900).
set -euo pipefail

BIN=$(realpath "${1:-bin/strata}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export STRATA_CACHE=${STRATA_CACHE:-/var/cache/strata-test}
TIMEOUT=${BOOT_TIMEOUT:-900}
WORK=${BOOT_WORK:-$(mktemp -d /tmp/strata-boot.XXXXXX)}
mkdir -p "$WORK"
. "$ROOT/scripts/boot-lib.sh"
boot_deps
trap stop_qemu EXIT

t0=$(date +%s)
echo "== build (work dir $WORK)"
[ -f "$WORK/k.key" ] || "$BIN" key generate --out "$WORK/k"
rm -rf "$WORK/out"
"$BIN" build-image "$ROOT/images/debian-bootable/recipe.yaml" --out "$WORK/out" --key "$WORK/k.key"
IMAGE=$(ls "$WORK"/out/*.squashfs | head -n1)
t1=$(date +%s)

echo "== provision"
rm -f "$WORK/disk.img" "$WORK/id" "$WORK/id.pub"
ssh-keygen -q -t ed25519 -N "" -C strata-boot-test -f "$WORK/id"
"$BIN" provision --image "$IMAGE" --disk "$WORK/disk.img" --size 3G --node-id boot1 --hostname strata-boot1 \
	--ssh-authorized-key "$WORK/id.pub"
cp /usr/share/OVMF/OVMF_VARS.fd "$WORK/vars.fd"
t2=$(date +%s)

echo "== overlays 1.0.1-1.0.3, applied to the disk offline"
REPO=$WORK/repo OV=$WORK/ov
rm -rf "$REPO" "$OV"
mkdir -p "$OV/wants"
"$BIN" repo init "$REPO" --image "$IMAGE" --key "$WORK/k.key"
# The check unit (1.0.1) reports what the node sees, then audits every file.
cat >"$OV/check.service" <<'UNIT'
[Unit]
Description=strata boot check: the overlays are in effect
# After the boot, not part of it (the file audit is slow under
# emulation). It reports whether multi-user.target is active: systemd
# does not always print `Reached target` on the console while a job
# ordered after it is queued.
After=multi-user.target ssh.service

[Service]
Type=oneshot
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/libexec/strata-boot-check
ExecStart=/usr/bin/strata verify-sequence --root / --files

[Install]
WantedBy=multi-user.target
UNIT
cat >"$OV/check.sh" <<'SCRIPT'
#!/bin/sh
m() { awk -v p="$1" '$5 == p { n++ } END { print n + 0 }' /proc/self/mountinfo; }
[ -e /etc/motd ] && motd=present || motd=deleted
so=$(findmnt -no OPTIONS /state | tr , '\n' | grep -cxE 'nodev|nosuid')
echo "STRATA-HOSTKEY $(cat /var/lib/ssh/ssh_host_ed25519_key.pub)"
echo "STRATA-BOOT-CHECK etc=[$(cat /etc/strata-boot-check)] usr=[$(cat /usr/share/strata-boot/check)] motd=$motd var-mounts=$(m /var) state-mounts=$(m /state) state-nodev-nosuid=$so multi-user=$(systemctl show -P ActiveState multi-user.target)"
SCRIPT
chmod 0755 "$OV/check.sh"
ln -s /etc/systemd/system/strata-boot-check.service "$OV/wants/strata-boot-check.service"
for v in 1.0.1 1.0.2 1.0.3; do printf 'layer %s\n' "$v" >"$OV/etc-$v"; done
printf 'usr layer 1.0.2\n' >"$OV/usr-1.0.2"
"$BIN" overlay create --repo "$REPO" --version 1.0.1 --key "$WORK/k.key" \
	--add /etc/strata-boot-check="$OV/etc-1.0.1" \
	--add /etc/systemd/system/strata-boot-check.service="$OV/check.service" \
	--add /etc/systemd/system/multi-user.target.wants="$OV/wants" \
	--add /usr/libexec/strata-boot-check="$OV/check.sh"
"$BIN" overlay create --repo "$REPO" --version 1.0.2 --key "$WORK/k.key" \
	--add /etc/strata-boot-check="$OV/etc-1.0.2" --add /usr/share/strata-boot/check="$OV/usr-1.0.2"
"$BIN" overlay create --repo "$REPO" --version 1.0.3 --key "$WORK/k.key" \
	--add /etc/strata-boot-check="$OV/etc-1.0.3" --delete /etc/motd
"$BIN" apply-overlay --disk "$WORK/disk.img" --repo "$REPO"
"$BIN" verify-sequence --disk "$WORK/disk.img" --repo "$REPO" --files
TREE=$("$BIN" verify-sequence --disk "$WORK/disk.img" --json | sed -n 's/.*"tree_digest": "\(sha256:[0-9a-f]*\)".*/\1/p')
[ -n "$TREE" ] || { echo "FAIL: no tree digest from verify-sequence --disk"; exit 1; }
t3=$(date +%s)

# A second disk with an empty ext4 labelled `state` (a stick someone
# plugged in): boot activation must take the state partition of the
# root's own disk, or it finds no ledger there and the check fails.
truncate -s 64M "$WORK/decoy.img"
mkfs.ext4 -q -F -L state "$WORK/decoy.img"

free_port
echo "== boot (up to ${TIMEOUT}s; console in $LOG; sshd on 127.0.0.1:$SSH_PORT)"
start_qemu "$WORK/disk.img" "$WORK/decoy.img"

CHECK='STRATA-BOOT-CHECK etc=[layer 1.0.3] usr=[usr layer 1.0.2] motd=deleted var-mounts=1 state-mounts=1 state-nodev-nosuid=2 multi-user=active'
ok_verify=0 ok_target=0 ok_host=0 ok_act=0 ok_check=0 ok_files=0 failed=0
deadline=$(($(date +%s) + TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$QEMU_PID" 2>/dev/null; do
	text=$(console)
	grep -aq 'OK: sequence verified' <<<"$text" && ok_verify=1
	grep -aqE 'Reached target (multi-user\.target|.*Multi-User System)' <<<"$text" && ok_target=1
	grep -aqF 'multi-user=active' <<<"$text" && ok_target=1
	# The host name given at provisioning (kernel command line).
	grep -aq 'strata-boot1' <<<"$text" && ok_host=1
	# The initramfs stacked the three layers (init-bottom/strata).
	grep -aqF 'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' <<<"$text" && ok_act=1
	# The check unit of overlay 1.0.1 saw every layer, then the file
	# audit found the tree of 1.0.3.
	grep -aqF "$CHECK" <<<"$text" && ok_check=1
	grep -aqF "tree      $TREE (files checked)" <<<"$text" && ok_files=1
	# A failed unit, audit or activation, or a panic fails the test at once.
	grep -aqE '\[FAILED\]|FAILED:|Kernel panic' <<<"$text" && failed=1
	if [ $failed = 1 ] || { [ $ok_verify = 1 ] && [ $ok_target = 1 ] && [ $ok_host = 1 ] &&
		[ $ok_act = 1 ] && [ $ok_check = 1 ] && [ $ok_files = 1 ]; }; then
		# The audit's verdict follows its tree line.
		sleep 2
		console | grep -aqE '\[FAILED\]|FAILED:' && failed=1
		break
	fi
	sleep 5
done
t4=$(date +%s)

# Over SSH, once the boot checks passed.
ok_ssh=0
if [ $ok_verify = 1 ] && [ $ok_target = 1 ] && [ $ok_check = 1 ] && [ $ok_files = 1 ] && [ $failed = 0 ]; then
	echo "== fleet over SSH"
	key=$(console | sed -n 's/.*STRATA-HOSTKEY \(ssh-ed25519 [A-Za-z0-9+/=]*\).*/\1/p' | head -n1)
	if [ -z "$key" ]; then
		echo "no host key on the console"
	else
		printf '[127.0.0.1]:%s %s\n' "$SSH_PORT" "$key" >"$WORK/known_hosts"
		printf 'nodes:\n  - name: boot1\n    address: 127.0.0.1:%s\n    user: root\n' "$SSH_PORT" >"$WORK/inventory.yaml"
		SSHF=(--inventory "$WORK/inventory.yaml" --repo "$REPO" --known-hosts "$WORK/known_hosts" --identity "$WORK/id" --ssh-timeout 60s)
		st=1
		for _ in 1 2 3 4 5 6; do
			"$BIN" status "${SSHF[@]}" --timeout 180s && { st=0; break; }
			sleep 10
		done
		printf 'layer 1.0.4\n' >"$OV/etc-1.0.4"
		if [ $st = 0 ] &&
			"$BIN" overlay create --repo "$REPO" --version 1.0.4 --key "$WORK/k.key" --add /etc/strata-boot-check="$OV/etc-1.0.4" &&
			"$BIN" rollout "${SSHF[@]}" --health-timeout 10m &&
			"$BIN" status "${SSHF[@]}" --timeout 180s --json >"$WORK/status.json"; then
			# pending, not current: the restart of the check unit that the
			# offline apply of 1.0.1 recorded as debt is still owed.
			grep -qE '"state": "(current|pending)"' "$WORK/status.json" && grep -q '"head": "1.0.4"' "$WORK/status.json" && ok_ssh=1
			cat "$WORK/status.json"
		fi
	fi
fi
t5=$(date +%s)
stop_qemu

echo "== timings: build $((t1 - t0))s, provision $((t2 - t1))s, overlays $((t3 - t2))s, boot $((t4 - t3))s, ssh $((t5 - t4))s"
if [ $ok_verify = 1 ] && [ $ok_target = 1 ] && [ $ok_host = 1 ] && [ $ok_act = 1 ] &&
	[ $ok_check = 1 ] && [ $ok_files = 1 ] && [ $failed = 0 ] && [ $ok_ssh = 1 ]; then
	console | grep -aE 'strata: |strata\[|STRATA-BOOT-CHECK|Reached target.*Multi-User|strata-boot1' | tail -n 30
	echo "PASS: layers 1.0.1-1.0.3 stacked at boot and in effect, multi-user.target reached, strata verify-sequence OK (--files: tree $TREE), hostname strata-boot1; over SSH: status at 1.0.3, rollout to 1.0.4, status at 1.0.4"
	[ -n "${BOOT_WORK:-}" ] || rm -rf "$WORK"
	exit 0
fi
echo "FAIL: multi-user=$ok_target verify=$ok_verify hostname=$ok_host activated=$ok_act check=$ok_check files=$ok_files failure-seen=$failed ssh=$ok_ssh; console:"
console | grep -aE '\[FAILED\]|FAILED|Kernel panic|strata: |strata\[|STRATA-BOOT-CHECK|drift' || true
echo "-- last lines:"
console | tail -n 40
exit 1
