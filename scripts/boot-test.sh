#!/usr/bin/env bash
# Boot test: build images/debian-bootable, provision a GPT disk from it,
# boot it with qemu-system-x86_64 + OVMF (software emulation: slow) and
# read over the serial console that the node reached multi-user.target and
# that strata-verify.service (`strata verify-sequence --root /`) passed.
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
LOG=$WORK/console.log
QEMU_PID=

need() { command -v "$1" >/dev/null 2>&1; }
if ! need qemu-system-x86_64 || [ ! -f /usr/share/OVMF/OVMF_CODE.fd ] ||
	[ ! -f /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || ! need mcopy ||
	! need mkfs.fat || ! need mkfs.ext4 || ! need debootstrap || ! need mksquashfs; then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-x86 ovmf systemd-boot-efi \
		mtools dosfstools e2fsprogs debootstrap squashfs-tools zstd minisign
fi

cleanup() {
	if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
		kill "$QEMU_PID" 2>/dev/null || true
		sleep 1
		kill -9 "$QEMU_PID" 2>/dev/null || true
	fi
}
trap cleanup EXIT

t0=$(date +%s)
echo "== build (work dir $WORK)"
[ -f "$WORK/k.key" ] || "$BIN" key generate --out "$WORK/k"
rm -rf "$WORK/out"
"$BIN" build-image "$ROOT/images/debian-bootable/recipe.yaml" --out "$WORK/out" --key "$WORK/k.key"
IMAGE=$(ls "$WORK"/out/*.squashfs | head -n1)
t1=$(date +%s)

echo "== provision"
rm -f "$WORK/disk.img"
"$BIN" provision --image "$IMAGE" --disk "$WORK/disk.img" --size 3G --node-id boot1 --hostname strata-boot1
cp /usr/share/OVMF/OVMF_VARS.fd "$WORK/vars.fd"
t2=$(date +%s)

echo "== boot (up to ${TIMEOUT}s; console in $LOG)"
: >"$LOG"
qemu-system-x86_64 -machine q35 -m 2048 -smp 2 -nographic \
	-serial "file:$LOG" -monitor none \
	-drive if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE.fd \
	-drive if=pflash,format=raw,file="$WORK/vars.fd" \
	-drive file="$WORK/disk.img",format=raw,if=virtio \
	-net none </dev/null >"$WORK/qemu.out" 2>&1 &
QEMU_PID=$!

ok_verify=0 ok_target=0 ok_host=0 failed=0
deadline=$(($(date +%s) + TIMEOUT))
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$QEMU_PID" 2>/dev/null; do
	text=$(tr -d '\r' <"$LOG" | sed 's/\x1b\[[0-9;]*m//g')
	grep -aq 'OK: sequence verified' <<<"$text" && ok_verify=1
	grep -aqE 'Reached target (multi-user\.target|.*Multi-User System)' <<<"$text" && ok_target=1
	# The host name given at provisioning (kernel command line).
	grep -aq 'strata-boot1' <<<"$text" && ok_host=1
	# A failed unit, a failed audit or a panic fails the test at once.
	grep -aqE '\[FAILED\]|FAILED: |Kernel panic' <<<"$text" && failed=1
	if [ $failed = 1 ] || { [ $ok_verify = 1 ] && [ $ok_target = 1 ] && [ $ok_host = 1 ]; }; then break; fi
	sleep 5
done
t3=$(date +%s)
cleanup
QEMU_PID=

echo "== timings: build $((t1 - t0))s, provision $((t2 - t1))s, boot $((t3 - t2))s"
if [ $ok_verify = 1 ] && [ $ok_target = 1 ] && [ $ok_host = 1 ] && [ $failed = 0 ]; then
	tr -d '\r' <"$LOG" | sed 's/\x1b\[[0-9;]*m//g' | grep -aE 'strata\[|Reached target.*Multi-User|strata-boot1' | tail -n 20
	echo "PASS: multi-user.target reached, strata verify-sequence OK, hostname strata-boot1"
	[ -n "${BOOT_WORK:-}" ] || rm -rf "$WORK"
	exit 0
fi
echo "FAIL: multi-user=$ok_target verify=$ok_verify hostname=$ok_host failure-seen=$failed; console:"
tr -d '\r' <"$LOG" | sed 's/\x1b\[[0-9;]*m//g' | grep -aE '\[FAILED\]|FAILED: |Kernel panic|strata\[' || true
echo "-- last lines:"
tr -d '\r' <"$LOG" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 40
exit 1
