#!/usr/bin/env bash
# Installs the Debian packages strata's tests, demo and benchmarks need,
# when they are missing. Safe to run repeatedly.
set -euo pipefail
need=()
for pair in mksquashfs:squashfs-tools sqfs2tar:squashfs-tools-ng rdsquashfs:squashfs-tools-ng \
	zstd:zstd xz:xz-utils minisign:minisign debootstrap:debootstrap ostree:ostree \
	mkfs.ext4:e2fsprogs e2fsck:e2fsprogs debugfs:e2fsprogs mkfs.fat:dosfstools fsck.vfat:dosfstools \
	mcopy:mtools mmd:mtools sbsign:sbsigntool sbverify:sbsigntool veritysetup:cryptsetup-bin fsck.erofs:erofs-utils cpio:cpio unshare:util-linux nsenter:util-linux losetup:mount unsquashfs:squashfs-tools ip:iproute2 \
	man:man-db make:make; do
	cmd=${pair%%:*} pkg=${pair##*:}
	PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# Disk provisioning puts systemd-boot on the ESP, and under Secure Boot a
# unified kernel image built on systemd's stub; sbsigntool signs both. The
# boot test runs qemu with OVMF, the Secure Boot build among them.
[ -e /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || need+=(systemd-boot-efi)
[ -e /usr/lib/systemd/boot/efi/linuxx64.efi.stub ] || need+=(systemd-boot-efi)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
[ -e /usr/share/OVMF/OVMF_CODE_4M.secboot.fd ] && [ -e /usr/share/OVMF/OVMF_VARS_4M.fd ] || need+=(ovmf)
if [ "${#need[@]}" -gt 0 ]; then
	mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
	echo "deps: installing ${need[*]}" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# mksquashfs -tar needs squashfs-tools 4.5 or newer.
# (Read the help text whole: grep -q closing the pipe early would make
# mksquashfs die of SIGPIPE and pipefail report a failure.)
help=$(mksquashfs -help 2>&1 || true)
case $help in
*"-tar"*) ;;
*) echo "deps: mksquashfs lacks -tar (need squashfs-tools >= 4.5)" >&2; exit 1 ;;
esac
# Servers the fleet tests start on loopback themselves (Prometheus scrapes
# agents; a registry holds an OCI repository): installed without
# recommends, and without letting the packages start their own services (a
# policy-rc.d that denies, as container images do).
servers=()
command -v prometheus >/dev/null 2>&1 || servers+=(prometheus)
command -v docker-registry >/dev/null 2>&1 || servers+=(docker-registry)
# A real browser renders the fleet status page in its test.
command -v chromium >/dev/null 2>&1 || servers+=(chromium)
# make bench compares strata's SSH fan-out with parallel-ssh against sshd
# processes it starts on loopback (the host's own ssh service stays off).
[ -x /usr/sbin/sshd ] || servers+=(openssh-server)
command -v parallel-ssh >/dev/null 2>&1 || servers+=(pssh)
# make bench compares strata serve's CPU per poll with nginx's under wrk
# (scripts/bench-serve.sh starts nginx on loopback itself).
[ -x /usr/sbin/nginx ] || servers+=(nginx)
command -v wrk >/dev/null 2>&1 || servers+=(wrk)
if [ "${#servers[@]}" -gt 0 ]; then
	echo "deps: installing ${servers[*]}" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	policy=/usr/sbin/policy-rc.d
	made=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod 755 "$policy"
		made=1
	fi
	$SUDO apt-get update -qq
	rc=0
	$SUDO apt-get install -y -qq --no-install-recommends "${servers[@]}" >/dev/null || rc=$?
	[ -z "$made" ] || $SUDO rm -f "$policy"
	[ "$rc" -eq 0 ] || exit "$rc"
fi
# make bench compares repo push and apply from an OCI registry with the
# ORAS CLI (scripts/bench-oci.sh), built from source with the go command.
if ! command -v oras >/dev/null 2>&1; then
	echo "deps: installing oras (go install)" >&2
	bin=/usr/local/bin
	[ "$(id -u)" -eq 0 ] || bin=$("${GO:-go}" env GOPATH)/bin
	GOBIN=$bin "${GO:-go}" install oras.land/oras/cmd/oras@v1.3.6
	command -v oras >/dev/null 2>&1 || echo "deps: oras is in $bin, which is not on PATH" >&2
fi
