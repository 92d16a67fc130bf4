#!/usr/bin/env bash
# Boot test: disk nodes of images/debian-bootable under
# qemu-system-x86_64 + OVMF (software emulation: slow), read over the
# serial console and over SSH, on real systemd-boot boot counting and
# systemd-bless-boot. One build of each image and one set of disks serve
# every phase. A reboot inside a node is a power cycle of its qemu
# (scripts/boot-lib.sh, start_qemu).
#
# Images 1.0.0 (the recipe), 1.1.0 (a recipe change: /etc/strata-release)
# and 1.2.0 (whose enabled strata-broken.service fails). Overlays
# 1.0.1-1.0.3 for the line: 1.0.1 adds a check unit, its script under
# /usr/libexec and a file under /etc; 1.0.2 changes that file and adds one
# under /usr/share; 1.0.3 changes it again and deletes /etc/motd. Two
# disks provisioned at 1.0.0 with the overlays applied offline
# (`apply-overlay --disk`) and audited (`verify-sequence --disk --files`).
#
# First, boot time: two more disks of 1.0.0 with the overlays, one
# verified (as every disk: the image's verity record is there) and one not
# (provisioned from a copy of the image without its record), boot once
# each; `systemd-analyze time` of each first boot goes to the timing line.
#
# Node up1, upgraded offline (`upgrade --disk`, one try) to 1.2.0, with a
# decoy disk carrying an empty partition labelled `state` (boot activation
# must take the state partition of the root's own disk):
#  1. the trial boot of 1.2.0 on root B fails the health check
#     (strata-upgrade-confirm.service) and reboots; the entry has no try
#     left, the firmware boots root A, boot activation stacks the three
#     layers and records the failed upgrade. The check unit sees every
#     layer in effect (a file under /etc changed by each overlay, one under
#     /usr, /etc/motd gone, /var and /state mounted once, /state nodev and
#     nosuid), strata-verify.service passes, the host name is the one
#     given at provisioning; over SSH `verify-sequence --files` finds the
#     tree digest of the offline audit, `strata status` names the failed
#     upgrade, and `status --inventory` finds the node at the head with
#     that failure in its note;
#  2. then it is upgraded live over SSH (`upgrade --root / --repo`, from a
#     copy of the repository on a second disk, where `repo add-image`
#     published 1.1.0): it boots root B with the three layers stacked
#     above 1.1.0, confirms, the entry is blessed, `verify-sequence
#     --files` passes.
# Every root is opened through dm-verity (the boot entry names the signed
# root hash; the check unit reports dm=verity, `strata status` a
# kernel-verified root).
# Node up2, offline compacted (`upgrade --disk --compact --repo --tries 1`)
# onto `strata regenerate --through 1.0.3`, published with `repo add-image`:
#  3. one byte of root B's first block is flipped on the disk: its trial
#     boot opens it through dm-verity, the kernel refuses the block
#     ("data block 0 is corrupted"), the initramfs cannot mount it and
#     restarts; root A boots and records the failed upgrade;
#  4. compacted again, it boots root B with no layer stacked and the tree digest it had,
#     the entry is blessed, and `strata rollout` brings it to overlay 1.0.4,
#     which `status --inventory` then reports;
#  5. 1.0.4's layer image is mounted through dm-verity (status:
#     kernel-verified); one byte of a file's content in it is changed on
#     the running node: the kernel refuses the next read of that file (EIO),
#     `verify-sequence --files` names the image, the next boot's activation
#     refuses it (the stacks without it, `LAYER REFUSED` on the console,
#     `strata status` naming it), and `restart --inventory --repair`
#     rewrites it from the repository: 1.0.4 in effect again, the audit
#     passes.
#  6. Secure Boot: the test's own Platform Key, KEK and db (openssl) are
#     enrolled into a copy of OVMF's empty variable store (`strata
#     secure-boot ovmf-vars`); a disk of 1.0.0 provisioned with
#     `--secure-boot-key` (systemd-boot and a unified kernel image signed
#     with the db key) and the overlays applied boots under OVMF's Secure
#     Boot build: the kernel says `Secure boot enabled`, the SecureBoot
#     variable is 1, the root is kernel-verified, and an upgrade of the
#     disk without the db key is refused. Then one digit of the
#     root hash in the kernel image's signed command line is changed on
#     the ESP: the firmware refuses it (systemd-boot: "Error loading
#     \EFI\Linux\strata-1-a.efi: Access Denied") and no kernel starts;
#     so it does with one byte of the kernel (.linux) changed instead.
#     With the signed image put back, the disk is upgraded offline to
#     1.1.0 with the db key (`upgrade --disk --secure-boot-key`, one
#     try: root B's kernel image signed for it) and one byte of root B
#     changed: the firmware runs B's signed image, dm-verity refuses the
#     root, root A boots, records the failed upgrade and `strata status`
#     says why. A boot image signed with a key the firmware's db does
#     not hold is refused by the node before anything is written (it
#     reads db from efivarfs), even as a rotation. Then the node upgrades
#     itself, with no key on it: 1.1.0's
#     boot image, signed on the host (`secure-boot sign-image`:
#     strata.root=auto, no partition, no host name) and published with
#     the image (`repo add-image --boot-image`), is taken over HTTP
#     (`strata serve`) by `upgrade --root / --repo`; root B boots it under
#     Secure Boot (the initramfs finds root B by its root hash), is
#     confirmed, its kernel image blessed, and the host name comes from
#     the state partition.
#
#   scripts/boot-test.sh [STRATA_BIN]
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
WORK=${BOOT_WORK:-$(mktemp -d /tmp/strata-boot.XXXXXX)}
mkdir -p "$WORK"
. "$ROOT/scripts/boot-lib.sh"
boot_deps
# The repository served over HTTP (strata serve), for the Secure Boot
# node's own upgrade: the node reaches it at 10.0.2.2 (qemu's user
# network maps it to the host's loopback).
SERVE_PID=
stop_serve() {
	[ -n "$SERVE_PID" ] || return 0
	kill "$SERVE_PID" 2>/dev/null
	wait "$SERVE_PID" 2>/dev/null
	SERVE_PID=
}
trap 'stop_qemu; stop_serve' EXIT
RECIPE=$ROOT/images/debian-bootable/recipe.yaml

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
cat >"$WORK/steps-1.1.0" <<'STEPS'
  - copy:
      path: /etc/strata-release
      content: "1.1.0\n"
STEPS
cat >"$WORK/steps-1.2.0" <<'STEPS'
  - copy:
      path: /etc/strata-release
      content: "1.2.0\n"
  - copy:
      path: /etc/systemd/system/strata-broken.service
      content: |
        [Unit]
        Description=strata boot test: a service that fails (image 1.2.0)

        [Service]
        Type=oneshot
        ExecStart=/bin/false

        [Install]
        WantedBy=multi-user.target
  - copy:
      path: /etc/systemd/system/multi-user.target.wants/strata-broken.service
      symlink: /etc/systemd/system/strata-broken.service
STEPS
"$BIN" build-image "$RECIPE" --out "$WORK/out/1.0.0" --key "$WORK/k.key"
"$BIN" build-image "$(variant 1.1.0 "$WORK/steps-1.1.0")" --out "$WORK/ship/v1.1.0" --key "$WORK/k.key"
"$BIN" build-image "$(variant 1.2.0 "$WORK/steps-1.2.0")" --out "$WORK/out/1.2.0" --key "$WORK/k.key"
IMAGE=$(ls "$WORK"/out/1.0.0/*.squashfs)
BAD=$(ls "$WORK"/out/1.2.0/*.squashfs)
grep -q '"strata-broken.service"' "${BAD%.squashfs}.image.json" || fail "image 1.2.0's catalog lacks strata-broken.service"
t1=$(date +%s)

echo "== overlays 1.0.1-1.0.3; nodes up1 (upgrade --disk to 1.2.0, 1 try) and up2 (upgrade --disk --compact)"
rm -f "$WORK"/disk*.img "$WORK/id" "$WORK/id.pub"
ssh-keygen -q -t ed25519 -N "" -C strata-boot-test -f "$WORK/id"
REPO=$WORK/repo OV=$WORK/ov
rm -rf "$REPO" "$OV"
mkdir -p "$OV/wants"
"$BIN" repo init "$REPO" --image "$IMAGE" --key "$WORK/k.key"
# The check unit (1.0.1) reports what each boot sees.
cat >"$OV/check.service" <<'UNIT'
[Unit]
Description=strata boot check: what this boot runs
# After the boot, not part of it. It reports whether multi-user.target
# is active: systemd does not always print `Reached target` on the
# console while a job ordered after it is queued.
After=multi-user.target ssh.service

[Service]
Type=oneshot
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/libexec/strata-boot-check

[Install]
WantedBy=multi-user.target
UNIT
cat >"$OV/check.sh" <<'SCRIPT'
#!/bin/sh
m() { awk -v p="$1" '$5 == p { n++ } END { print n + 0 }' /proc/self/mountinfo; }
[ -e /etc/motd ] && motd=present || motd=deleted
so=$(findmnt -no OPTIONS /state | tr , '\n' | grep -cxE 'nodev|nosuid')
# The root: a dm-verity device (its target type) on a root partition.
sys=/sys/dev/block/$(findmnt -no MAJ:MIN / | tr -d ' ')
dm=none root=$(findmnt -no SOURCE /)
if [ -e "$sys/dm" ]; then
	dm=$(dmsetup table "$(cat "$sys/dm/name")" | awk '{ print $3 }')
	root=/dev/$(ls "$sys/slaves")
fi
echo "STRATA-HOSTKEY $(cat /var/lib/ssh/ssh_host_ed25519_key.pub)"
echo "STRATA-BOOT-CHECK etc=[$(cat /etc/strata-boot-check)] usr=[$(cat /usr/share/strata-boot/check)] motd=$motd var-mounts=$(m /var) state-mounts=$(m /state) state-nodev-nosuid=$so multi-user=$(systemctl show -P ActiveState multi-user.target)"
echo "STRATA-UPGRADE-CHECK release=$(cat /etc/strata-release 2>/dev/null || echo 1.0.0) etc=[$(cat /etc/strata-boot-check)] stacks=$(findmnt -n -t overlay | wc -l) root=$(lsblk -dno PARTLABEL "$root") dm=$dm"
SCRIPT
chmod 0755 "$OV/check.sh"
ln -s /etc/systemd/system/strata-boot-check.service "$OV/wants/strata-boot-check.service"
for v in 1.0.1 1.0.2 1.0.3 1.0.4; do printf 'layer %s\n' "$v" >"$OV/etc-$v"; done
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
for n in 1 2; do
	"$BIN" provision --image "$IMAGE" --disk "$WORK/disk$n.img" --size 4G --node-id "up$n" --hostname "strata-up$n" \
		--ssh-authorized-key "$WORK/id.pub"
	"$BIN" apply-overlay --disk "$WORK/disk$n.img" --repo "$REPO"
done
"$BIN" verify-sequence --disk "$WORK/disk1.img" --repo "$REPO" --files
TREE=$("$BIN" verify-sequence --disk "$WORK/disk1.img" --json | json_field tree_digest)
[ -n "$TREE" ] || fail "no tree digest from verify-sequence --disk"
"$BIN" upgrade --disk "$WORK/disk1.img" --image "$BAD" --tries 1
TREE2=$("$BIN" verify-sequence --disk "$WORK/disk2.img" --json | json_field tree_digest)
[ "$TREE2" = "$TREE" ] || fail "up2's tree $TREE2 is not up1's $TREE"
# Both upgrade images are published in the repository (repo add-image) and
# taken from it (upgrade --repo): the regenerated one offline by up2, 1.1.0
# live by up1 from a copy of the repository on a second disk it mounts.
"$BIN" regenerate --repo "$REPO" --through 1.0.3 --out "$WORK/regen" --key "$WORK/k.key"
"$BIN" repo add-image "$REPO" --image "$(ls "$WORK"/regen/*.squashfs)" --key "$WORK/k.key"
"$BIN" repo add-image "$REPO" --image "$(ls "$WORK"/ship/v1.1.0/*.squashfs)" --key "$WORK/k.key"
"$BIN" verify-sequence --repo "$REPO" >/dev/null || fail "verify-sequence --repo with upgrade images"
"$BIN" upgrade --disk "$WORK/disk2.img" --compact --repo "$REPO" --tries 1
rm -rf "$WORK/shiprepo" "$WORK/ship.img"
mkdir -p "$WORK/shiprepo"
cp -a "$REPO" "$WORK/shiprepo/repo"
truncate -s 2G "$WORK/ship.img"
mkfs.ext4 -q -F -L strata-images -d "$WORK/shiprepo" "$WORK/ship.img"
# A disk with an empty ext4 labelled `state` (a stick someone plugged in).
truncate -s 64M "$WORK/decoy.img"
mkfs.ext4 -q -F -L state "$WORK/decoy.img"
t2=$(date +%s)

echo "== 0. boot time: a verified disk against an unverified one (the same image, layers and first boot)"
PLAIN=$WORK/plain
rm -rf "$PLAIN" && mkdir -p "$PLAIN"
for f in "$WORK"/out/1.0.0/*; do
	case $f in *.verity.json*) ;; *) cp -a "$f" "$PLAIN/" ;; esac
done
# boot_time DISK DM: boots DISK once, checks that its root is DM (verity
# or none), and sets BOOT_LINE to what systemd-analyze says of that boot
# and BOOT_LAYERS to how status says its layer images are checked.
boot_time() {
	local line=""
	boot "$1"
	wait_for "first boot of $1" 'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=2 root=rootA dm='"$2"
	ssh_up
	BOOT_LAYERS=$(on_node strata status --root / | sed -n 's/^checks    //p')
	[ -n "$BOOT_LAYERS" ] || fail "status on $1 does not say how its layers are checked"
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		# Until the boot has finished, systemd-analyze fails.
		line=$(on_node systemd-analyze time 2>/dev/null | sed -n 's/^Startup finished in \(.*[^ ]\) *$/\1/p' || true)
		[ -n "$line" ] && break
		sleep 5
	done
	[ -n "$line" ] || fail "systemd-analyze time: the boot of $1 did not finish"
	power_off
	BOOT_LINE=$line
}
for v in verified plain; do
	img=$IMAGE
	[ $v = plain ] && img=$(ls "$PLAIN"/*.squashfs)
	rm -f "$WORK/time-$v.img"
	out=$("$BIN" provision --image "$img" --disk "$WORK/time-$v.img" --size 4G --node-id "time-$v" --hostname "strata-time-$v" \
		--ssh-authorized-key "$WORK/id.pub")
	case $v in
	verified) grep -q 'root A: dm-verity, root hash' <<<"$out" || fail "the timing disk is not verified: $out" ;;
	plain) grep -q 'root A: unverified' <<<"$out" || fail "the timing disk is verified: $out" ;;
	esac
	"$BIN" apply-overlay --disk "$WORK/time-$v.img" --repo "$REPO" >/dev/null
done
boot_time "$WORK/time-verified.img" verity
BOOT_VERIFIED=$BOOT_LINE
echo "   verified root:   $BOOT_VERIFIED (layers: $BOOT_LAYERS)"
boot_time "$WORK/time-plain.img" none
BOOT_PLAIN=$BOOT_LINE
echo "   unverified root: $BOOT_PLAIN (layers: $BOOT_LAYERS)"
rm -f "$WORK/time-verified.img" "$WORK/time-plain.img"
t20=$(date +%s)

# blessed ENTRY [DIR]: the node's ESP has ENTRY without a boot counter in DIR
# (/efi/loader/entries; /efi/EFI/Linux for a unified kernel image).
blessed() {
	local entries
	for _ in 1 2 3 4 5 6; do
		entries=$(on_node ls "${2:-/efi/loader/entries}")
		grep -qx "$1" <<<"$entries" && return 0
		sleep 10
	done
	fail "entry $1 is not blessed: $(tr '\n' ' ' <<<"$entries")"
}

# inventory NODE: an inventory of the booted node, and the flags that reach it.
inventory() {
	printf 'nodes:\n  - name: %s\n    address: 127.0.0.1:%s\n    user: root\n' "$1" "$SSH_PORT" >"$WORK/inventory.yaml"
	SSHF=(--inventory "$WORK/inventory.yaml" --repo "$REPO" --known-hosts "$WORK/known_hosts" --identity "$WORK/id" --ssh-timeout 60s)
}

echo "== 1. up1: the trial boot of 1.2.0 on root B fails, root A boots with the three layers"
boot "$WORK/disk1.img" "$WORK/ship.img" "$WORK/decoy.img"
wait_for "trial boot of 1.2.0" 'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' 'trial boot of image 1.2.0' \
	'strata-broken.service failed' 'reboot: Restarting system'
mark
wait_for "fallback to root A" 'opened as /dev/mapper/strata-root: dm-verity, image debian-bootable-1.0.0, root hash' \
	'upgrade failed, recorded: upgrade to image 1.2.0 (root b, boot entry strata-2-b.conf) did not boot to health' \
	'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' \
	'STRATA-BOOT-CHECK etc=[layer 1.0.3] usr=[usr layer 1.0.2] motd=deleted var-mounts=1 state-mounts=1 state-nodev-nosuid=2 multi-user=active' \
	'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=2 root=rootA dm=verity' \
	'OK: sequence verified' 'strata-up1'
no_failure "fallback boot"
ssh_up
got=$(on_node strata verify-sequence --root / --files --json | json_field tree_digest)
[ "$got" = "$TREE" ] || fail "the node's own file audit found tree $got, the offline one $TREE"
st=$(on_node strata status --root /)
echo "$st"
grep -q '^failed    upgrade to image 1.2.0 ' <<<"$st" || fail "status does not name the failed upgrade"
grep -q '^root      dm-verity: kernel-verified, root hash ' <<<"$st" || fail "status does not report the verified root"
grep -q '^head      1.0.3 ' <<<"$st" && grep -q '^layers    1.0.1 1.0.2 1.0.3$' <<<"$st" || fail "the head or the layers moved"
inventory up1
# It exits 0 or 3 (3: the node's failure counts); the row says which.
rc=0
"$BIN" status "${SSHF[@]}" --timeout 180s --json >"$WORK/status.json" || rc=$?
cat "$WORK/status.json"
[ $rc = 0 ] || [ $rc = 3 ] || fail "status --inventory exited $rc"
grep -q '"head": "1.0.3"' "$WORK/status.json" && grep -q '"last_failure": "failed 1.2.0 at ' "$WORK/status.json" ||
	fail "status --inventory: not at 1.0.3, or no failed upgrade in the note"
t3=$(date +%s)

echo "== 2. up1: upgrade to image 1.1.0, live"
on_node "mkdir -p /run/images && mount -o ro LABEL=strata-images /run/images && strata upgrade --root / --repo /run/images/repo"
! on_node 'ls -d /var/tmp/strata-upgrade-*' >/dev/null 2>&1 || fail "upgrade --repo left its copy of the image in /var/tmp"
on_node strata status --root / | grep -q '^upgrade   staged: image 1.1.0 on root B' || fail "status shows no staged upgrade"
mark
on_node systemctl reboot || true
wait_for "trial boot of 1.1.0" 'strata: activated /root at 1.0.3 (layers: 1.0.1 1.0.2 1.0.3)' 'trial boot of image 1.1.0' \
	'upgrade to image 1.1.0 confirmed: node / healthy, at 1.0.3' 'STRATA-UPGRADE-CHECK release=1.1.0 etc=[layer 1.0.3] stacks=2 root=rootB dm=verity'
no_failure "1.1.0 boot"
ssh_up
on_node strata verify-sequence --root / --files || fail "verify-sequence --files on 1.1.0"
st=$(on_node strata status --root /)
echo "$st"
grep -q '^running   image 1.1.0 on root B ' <<<"$st" && grep -q '^layers    1.0.1 1.0.2 1.0.3$' <<<"$st" &&
	grep -q '^root      dm-verity: kernel-verified, root hash ' <<<"$st" &&
	! grep -q '^upgrade ' <<<"$st" || fail "status on 1.1.0"
blessed strata-3-b.conf
t4=$(date +%s)

# flip_root_b DISK: one byte of the first block of DISK's root B (the
# squashfs superblock's block) inverted, after the upgrade wrote and
# read it back.
flip_root_b() {
	local start off byte
	start=$(partx -g -o START,NAME "$1" | awk '$2 == "rootB" { print $1 }')
	[ -n "$start" ] || fail "no rootB partition on $1"
	off=$((start * 512 + 100))
	byte=$(dd if="$1" bs=1 skip="$off" count=1 status=none | od -An -tu1 | tr -d ' ')
	printf "\\$(printf %03o $((byte ^ 255)))" | dd of="$1" bs=1 seek="$off" count=1 conv=notrunc status=none
}

echo "== 3. up2: root B with one byte changed fails dm-verity; root A boots and records the failed upgrade"
flip_root_b "$WORK/disk2.img"
boot "$WORK/disk2.img"
wait_for "a changed root B refused" 'opened as /dev/mapper/strata-root: dm-verity, image debian-bootable-1.0.0+head.1.0.3' \
	'data block 0 is corrupted' 'strata: VERIFIED ROOT REFUSED: root /dev/' 'not booting an unverified root; restarting in 10 s'
mark
wait_for "fallback to root A" 'opened as /dev/mapper/strata-root: dm-verity, image debian-bootable-1.0.0, root hash' \
	'upgrade failed, recorded: upgrade to image 1.0.0+head.1.0.3 (root b, boot entry strata-2-b.conf) did not boot to health' \
	'its boot was refused: root /dev/' 'data block 0 is corrupted' \
	'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=2 root=rootA dm=verity'
no_failure "fallback from a changed root"
ssh_up
st=$(on_node strata status --root /)
echo "$st"
grep -q '^failed    upgrade to image 1.0.0+head.1.0.3 .*its boot was refused: root /dev/.*data block 0 is corrupted' <<<"$st" ||
	fail "status does not say why root B was refused"
power_off
t45=$(date +%s)
"$BIN" upgrade --disk "$WORK/disk2.img" --compact --repo "$REPO" --tries 1

echo "== 4. up2: compacted onto the regenerated image, then overlay 1.0.4 rolled out"
boot "$WORK/disk2.img"
wait_for "trial boot of the regenerated image" 'strata: activated /root at 1.0.3 (layers: none)' 'trial boot of image' \
	'confirmed: node / healthy, at 1.0.3' 'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.3] stacks=0 root=rootB dm=verity'
no_failure "compaction boot"
ssh_up
got=$(on_node strata verify-sequence --root / --files --json | json_field tree_digest)
[ "$got" = "$TREE2" ] || fail "tree after compaction $got, before $TREE2"
blessed strata-3-b.conf
"$BIN" overlay create --repo "$REPO" --version 1.0.4 --key "$WORK/k.key" --add /etc/strata-boot-check="$OV/etc-1.0.4"
inventory up2
"$BIN" rollout "${SSHF[@]}" --health-timeout 10m || fail "rollout of 1.0.4 after compaction"
st=$(on_node strata status --root /)
echo "$st"
grep -q '^head      1.0.4 ' <<<"$st" && grep -q '^layers    1.0.4$' <<<"$st" || fail "status after the rollout"
[ "$(on_node cat /etc/strata-boot-check)" = "layer 1.0.4" ] || fail "1.0.4 not in effect"
"$BIN" status "${SSHF[@]}" --timeout 180s --json >"$WORK/status.json" || true
grep -q '"head": "1.0.4"' "$WORK/status.json" && grep -qE '"state": "(current|pending)"' "$WORK/status.json" ||
	fail "status --inventory after the rollout: $(cat "$WORK/status.json")"
t5=$(date +%s)

echo "== 5. up2: a byte of layer 1.0.4's image changed on the running node: the audit names it, the next boot refuses it, restart --repair rewrites it"
st=$(on_node strata status --root /)
grep -q '^checks    1 layer image(s), kernel-verified$' <<<"$st" || fail "status does not say the layers are kernel-verified: $st"
on_node 'grep -qx "strata-layer-.*" /sys/block/dm-*/dm/name && findmnt -rno SOURCE,FSTYPE | grep -q "^/dev/mapper/strata-layer-.* erofs$"' ||
	fail "layer 1.0.4 is not mounted through a dm-verity device"
# The byte changed is the first of the file's content in the image: the
# kernel refuses the block at the next read that misses the page cache.
on_node 'off=$(grep -oba "layer 1\.0\.4" /var/lib/strata/layers/1.0.4.erofs | head -n1 | cut -d: -f1) && [ -n "$off" ] &&
	printf L | dd of=/var/lib/strata/layers/1.0.4.erofs bs=1 seek="$off" count=1 conv=notrunc status=none && sync' ||
	fail "changing a byte of layer 1.0.4's image"
rc=0
out=$(on_node 'echo 3 >/proc/sys/vm/drop_caches; cat /etc/strata-boot-check' 2>&1) || rc=$?
echo "read of the changed file: $out (exit $rc)"
[ $rc != 0 ] && grep -q 'Input/output error' <<<"$out" || fail "the changed block of layer 1.0.4 was read, not refused by dm-verity: $out"
on_node 'dmesg | grep -m1 "verity.*corrupted"' || fail "no dm-verity corruption in the kernel log"
rc=0
out=$(on_node strata verify-sequence --root / --files) || rc=$?
echo "$out"
[ $rc = 3 ] && grep -q 'var/lib/strata/layers/1.0.4.erofs' <<<"$out" && grep -q "reading the node's tree" <<<"$out" ||
	fail "verify-sequence --files does not name the changed layer image and the refused read (exit $rc)"
mark
on_node systemctl reboot || true
wait_for "the changed layer image refused at activation" 'strata: activated /root at 1.0.4 (layers: none)' \
	'LAYER REFUSED: layer 1.0.4: ' 'STRATA-BOOT-CHECK etc=[layer 1.0.3]'
ssh_up
st=$(on_node strata status --root /)
echo "$st"
grep -q '^REFUSED   layer 1.0.4 at activation ' <<<"$st" || fail "status does not name the refused layer"
"$BIN" restart "${SSHF[@]}" --repair || fail "restart --repair of the refused layer"
st=$(on_node strata status --root /)
echo "$st"
! grep -q '^REFUSED' <<<"$st" && grep -q '^layers    1.0.4$' <<<"$st" || fail "status after the repair"
[ "$(on_node cat /etc/strata-boot-check)" = "layer 1.0.4" ] || fail "1.0.4 not in effect after the repair"
grep -q '^checks    1 layer image(s), kernel-verified$' <<<"$st" || fail "the repaired layer is not kernel-verified: $st"
on_node strata verify-sequence --root / --files || fail "verify-sequence --files after the repair"
t6=$(date +%s)
stop_qemu

echo "== 6. Secure Boot: a disk signed with the test's db key boots with Secure Boot enforcing; its kernel image with one byte of the command line or of the kernel changed is refused by the firmware; upgraded with the key, its root B with one byte changed fails dm-verity and root A boots; the node refuses a boot image its db does not trust, upgrades itself with the published boot image, and root B boots"
# The test's own Platform Key, KEK and db, enrolled into a copy of OVMF's
# empty variable store (no Microsoft keys); "other" is a db key the
# firmware does not trust.
for k in pk kek db other; do
	openssl req -new -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -subj "/CN=strata boot test $k/" \
		-keyout "$WORK/sb-$k.key" -out "$WORK/sb-$k.crt" 2>"$WORK/openssl.err" || fail "openssl: $(cat "$WORK/openssl.err")"
done
"$BIN" secure-boot ovmf-vars --pk "$WORK/sb-pk.crt" --kek "$WORK/sb-kek.crt" --db "$WORK/sb-db.crt" --out "$WORK/sb-vars.fd"
rm -f "$WORK/sb.img"
out=$("$BIN" provision --image "$IMAGE" --disk "$WORK/sb.img" --size 4G --node-id sb --hostname strata-sb \
	--ssh-authorized-key "$WORK/id.pub" --secure-boot-key "$WORK/sb-db.key" --secure-boot-cert "$WORK/sb-db.crt")
grep -q 'Secure Boot: /EFI/Linux/strata-1-a.efi' <<<"$out" || fail "the disk is not signed for Secure Boot: $out"
"$BIN" apply-overlay --disk "$WORK/sb.img" --repo "$REPO" >/dev/null
boot_sb "$WORK/sb-vars.fd" "$WORK/sb.img"
wait_for "the signed disk's boot" 'Secure boot enabled' 'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.4] stacks=2 root=rootA dm=verity'
no_failure "the signed disk's boot"
ssh_up
sbvar=$(on_node od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c | awk '{ print $NF }')
[ "$sbvar" = 1 ] || fail "the firmware's SecureBoot variable is $sbvar on the node, not 1"
st=$(on_node strata status --root /)
grep -qE '^root +dm-verity: kernel-verified, root hash ' <<<"$st" || fail "status on the signed node: the root is not kernel-verified: $st"
power_off
rc=0
out=$("$BIN" upgrade --disk "$WORK/sb.img" --image "$BAD" --dry-run 2>&1) || rc=$?
[ $rc = 3 ] && grep -q 'strata secure-boot sign-image' <<<"$out" || fail "an upgrade of the Secure Boot disk was not refused (exit $rc): $out"
# One byte of the signed command line changed: a digit of the root hash.
esp=$(($(partx -g -o START -n 1 "$WORK/sb.img") * 512))
MTOOLS_SKIP_CHECK=1 mcopy -n -i "$WORK/sb.img@@$esp" ::/EFI/Linux/strata-1-a.efi "$WORK/sb.efi"
cp "$WORK/sb.efi" "$WORK/sb-signed.efi"
# The first match is in .cmdline, which comes before the initrd and the
# kernel (the verity initrd's strata has the string too).
off=$(grep -obUaF -m1 'strata.verity=' "$WORK/sb.efi" | head -n1 | cut -d: -f1)
[ -n "$off" ] || fail "no root hash in the kernel image's command line"
off=$((off + 14))
[ "$(dd if="$WORK/sb.efi" bs=1 skip="$off" count=1 status=none)" = 0 ] && digit=1 || digit=0
printf %s "$digit" | dd of="$WORK/sb.efi" bs=1 seek="$off" conv=notrunc status=none
MTOOLS_SKIP_CHECK=1 mcopy -o -i "$WORK/sb.img@@$esp" "$WORK/sb.efi" ::/EFI/Linux/strata-1-a.efi
boot_sb "$WORK/sb-vars.fd" "$WORK/sb.img"
wait_for "the changed kernel image refused by the firmware" 'Error loading \EFI\Linux\strata-1-a.efi: Access Denied'
console | grep -a 'Error loading' | head -n1
sleep 15
console | grep -aqE 'Linux version|EFI stub' && fail "a kernel started from the changed kernel image"
stop_qemu
# One byte of the kernel changed: a letter of the version string in the
# bzImage's uncompressed setup code (.linux, after .cmdline and .initrd).
cp "$WORK/sb-signed.efi" "$WORK/sb.efi"
koff=$(grep -obUaF -m1 'debian-kernel@lists.debian.org' "$WORK/sb.efi" | head -n1 | cut -d: -f1)
[ -n "$koff" ] && [ "$koff" -gt "$off" ] || fail "no kernel version string after the command line in the kernel image"
printf X | dd of="$WORK/sb.efi" bs=1 seek="$koff" conv=notrunc status=none
MTOOLS_SKIP_CHECK=1 mcopy -o -i "$WORK/sb.img@@$esp" "$WORK/sb.efi" ::/EFI/Linux/strata-1-a.efi
boot_sb "$WORK/sb-vars.fd" "$WORK/sb.img"
wait_for "the changed kernel refused by the firmware" 'Error loading \EFI\Linux\strata-1-a.efi: Access Denied'
sleep 15
console | grep -aqE 'Linux version|EFI stub' && fail "a kernel started from the changed kernel"
stop_qemu
MTOOLS_SKIP_CHECK=1 mcopy -o -i "$WORK/sb.img@@$esp" "$WORK/sb-signed.efi" ::/EFI/Linux/strata-1-a.efi
# Upgraded offline with the db key (the host that holds it): root B's
# kernel image signed, one try; then one byte of root B changed.
out=$("$BIN" upgrade --disk "$WORK/sb.img" --repo "$REPO" --tries 1 --secure-boot-key "$WORK/sb-db.key" --secure-boot-cert "$WORK/sb-db.crt")
grep -q 'image 1.0.0 -> 1.1.0' <<<"$out" && grep -q 'boot entry strata-2-b+1.efi (1 tries)' <<<"$out" ||
	fail "the signed upgrade of the Secure Boot disk: $out"
flip_root_b "$WORK/sb.img"
boot_sb "$WORK/sb-vars.fd" "$WORK/sb.img"
wait_for "a changed root B refused under Secure Boot" 'Secure boot enabled' 'opened as /dev/mapper/strata-root: dm-verity, image debian-bootable-1.1.0' \
	'data block 0 is corrupted' 'strata: VERIFIED ROOT REFUSED: root /dev/'
mark
wait_for "fallback to root A under Secure Boot" 'Secure boot enabled' \
	'upgrade failed, recorded: upgrade to image 1.1.0 (root b, boot entry strata-2-b.efi) did not boot to health' \
	'its boot was refused: root /dev/' 'STRATA-UPGRADE-CHECK release=1.0.0 etc=[layer 1.0.4] stacks=2 root=rootA dm=verity'
no_failure "fallback under Secure Boot"
ssh_up
st=$(on_node strata status --root /)
grep -q '^failed    upgrade to image 1.1.0 .*its boot was refused: root /dev/.*data block 0 is corrupted' <<<"$st" ||
	fail "status on the signed node does not say why root B was refused: $st"
# The node upgrades itself, with no key on it: 1.1.0's boot image is
# signed with the db key on the host, as CI would (secure-boot
# sign-image: strata.root=auto, no partition, no host name), published
# with the image already in the repository (repo add-image --boot-image),
# which strata serve serves over HTTP; upgrade --repo on the node takes
# the image and the boot image. Its trial boot under Secure Boot finds
# root B by the root hash, is confirmed and its kernel image blessed, and
# the host name comes from the state partition's identity.
V110=$(ls "$WORK"/ship/v1.1.0/*.squashfs)
"$BIN" secure-boot sign-image --image "$V110" --secure-boot-key "$WORK/sb-db.key" --secure-boot-cert "$WORK/sb-db.crt" --out "$WORK/sb-1.1.0.efi" >/dev/null
out=$("$BIN" repo add-image "$REPO" --image "$V110" --boot-image "$WORK/sb-1.1.0.efi" --key "$WORK/k.key")
grep -q '^  boot image images/debian-bootable-1.1.0\.[0-9a-f]*\.efi ' <<<"$out" || fail "repo add-image --boot-image: $out"
SSH_PORT_SAVED=$SSH_PORT
free_port
SERVE_PORT=$SSH_PORT SSH_PORT=$SSH_PORT_SAVED
# First a copy of the repository whose boot image is signed with a key
# the firmware's db does not hold: the node reads its own db (efivarfs)
# and refuses it before anything is written, even as a rotation.
"$BIN" secure-boot sign-image --image "$V110" --secure-boot-key "$WORK/sb-other.key" --secure-boot-cert "$WORK/sb-other.crt" --out "$WORK/sb-other-1.1.0.efi" >/dev/null
cp -al "$REPO" "$WORK/repo-other"
rm -f "$WORK/repo-other/.lock" # a lock file of its own (a lock with two links is refused)
"$BIN" repo add-image "$WORK/repo-other" --image "$V110" --boot-image "$WORK/sb-other-1.1.0.efi" --key "$WORK/k.key" >/dev/null
"$BIN" serve "$WORK/repo-other" --listen "127.0.0.1:$SERVE_PORT" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
rc=0
out=$(on_node strata upgrade --root / --repo "http://10.0.2.2:$SERVE_PORT" --secure-boot-rotate --tries 1 2>&1) || rc=$?
[ $rc = 3 ] && grep -q "signed by CN=strata boot test other, which this machine's firmware does not trust: its db (/sys/firmware/efi/efivars/db-\*) holds CN=strata boot test db" <<<"$out" ||
	fail "a boot image signed with a key the firmware's db does not hold was not refused (exit $rc): $out"
on_node ls /efi/EFI/Linux | grep -q 'strata-3-b' && fail "the refused boot image left an entry: $(on_node ls /efi/EFI/Linux)"
stop_serve
"$BIN" serve "$REPO" --listen "127.0.0.1:$SERVE_PORT" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
out=$(on_node strata upgrade --root / --repo "http://10.0.2.2:$SERVE_PORT" --tries 1) ||
	fail "the Secure Boot node's own upgrade: $out $(cat "$WORK/serve.log")"
echo "$out"
grep -q 'image 1.0.0 -> 1.1.0' <<<"$out" && grep -q 'boot entry strata-3-b+1.efi (1 tries)' <<<"$out" ||
	fail "the Secure Boot node's own upgrade: $out"
stop_serve
[ "$(on_node sha256sum /efi/EFI/Linux/strata-3-b+1.efi | cut -d' ' -f1)" = "$(sha256sum "$WORK/sb-1.1.0.efi" | cut -d' ' -f1)" ] ||
	fail "root B's kernel image on the ESP is not the published boot image"
mark
on_node systemctl reboot || true
wait_for "the self-upgraded node's trial boot" 'Secure boot enabled' \
	'opened as /dev/mapper/strata-root: dm-verity, image debian-bootable-1.1.0' 'trial boot of image 1.1.0' \
	'upgrade to image 1.1.0 confirmed: node / healthy, at 1.0.4' 'STRATA-UPGRADE-CHECK release=1.1.0 etc=[layer 1.0.4] stacks=2 root=rootB dm=verity'
no_failure "the self-upgraded node's boot"
ssh_up
blessed strata-3-b.efi /efi/EFI/Linux
st=$(on_node strata status --root /)
grep -q '^running   image 1.1.0 on root B ' <<<"$st" && grep -qE '^root +dm-verity: kernel-verified, root hash ' <<<"$st" ||
	fail "status after the self-upgrade: $st"
on_node cat /proc/cmdline | grep -q 'strata.root=auto' || fail "root B did not boot the boot image: $(on_node cat /proc/cmdline)"
[ "$(on_node hostname)" = strata-sb ] || fail "the self-upgraded node's host name is $(on_node hostname), not strata-sb"
power_off
t7=$(date +%s)

# secs SPAN: a systemd time span ("1min 2.345s", "350ms") in seconds.
secs() { tr ' ' '\n' <<<"$1" | awk '/ms$/ { t += substr($0, 1, length - 2) / 1000; next } /min$/ { t += 60 * substr($0, 1, length - 3) } /[0-9]s$/ { t += substr($0, 1, length - 1) } END { printf "%.3f", t }'; }
bv=$(secs "${BOOT_VERIFIED##*= }") bp=$(secs "${BOOT_PLAIN##*= }")
echo "== boot to the default target, first boot (systemd-analyze): verified disk ${bv}s, unverified disk ${bp}s, $(awk -v a="$bv" -v b="$bp" 'BEGIN { printf "%.2f", a / b }')x"
echo "== timings: builds $((t1 - t0))s, disks $((t2 - t1))s, boot-time disks $((t20 - t2))s, failed trial and fallback $((t3 - t20))s, upgrade $((t4 - t3))s, changed root refused $((t45 - t4))s, compaction and rollout $((t5 - t45))s, changed layer refused and repaired $((t6 - t5))s, Secure Boot $((t7 - t6))s"
echo "PASS: a verified and an unverified disk booted (timed); up1: the failed trial of 1.2.0 fell back to root A (recorded, in status and the fleet view), layers 1.0.1-1.0.3 stacked and in effect, verify-sequence --files tree $TREE; then 1.1.0 on root B with the layers, verify-sequence --files OK, blessed; up2: a root B with one byte changed refused by dm-verity, root A booted and recorded it; then compacted onto root B (no layers, the same tree, blessed), 1.0.4 rolled out; its layer image kernel-verified, with one byte changed refused by dm-verity on read, named by the audit, refused at the next boot (the stacks without it, status naming it), rewritten by restart --repair; every root opened through dm-verity; a disk signed for Secure Boot booted with it enforcing, with one byte of its command line or of its kernel changed was refused by the firmware, and upgraded offline with the db key, its root B with one byte changed failed dm-verity and root A booted and recorded why; then the node refused a boot image its firmware's db does not trust, upgraded itself over HTTP with the boot image signed for the line, and root B booted it under Secure Boot, confirmed and blessed, with its own host name"
[ -n "${BOOT_WORK:-}" ] || rm -rf "$WORK"
