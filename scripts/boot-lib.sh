# Shared by the boot test (scripts/boot-test.sh): sourced, not run.
# Needs $WORK (work directory), $BIN (strata) and $TIMEOUT (seconds).

LOG=$WORK/console.log
QEMU_PID=

need() { command -v "$1" >/dev/null 2>&1; }

# boot_deps installs what booting a disk under qemu needs.
boot_deps() {
	if ! need qemu-system-x86_64 || [ ! -f /usr/share/OVMF/OVMF_CODE.fd ] ||
		[ ! -f /usr/share/OVMF/OVMF_CODE_4M.secboot.fd ] || [ ! -f /usr/lib/systemd/boot/efi/linuxx64.efi.stub ] ||
		! need sbsign || ! need sbverify || ! need openssl || ! need partx ||
		[ ! -f /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || ! need mcopy ||
		! need mkfs.fat || ! need mkfs.ext4 || ! need debootstrap || ! need mksquashfs ||
		! need ssh-keygen || ! need ss; then
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-x86 ovmf systemd-boot-efi \
			mtools dosfstools e2fsprogs debootstrap squashfs-tools zstd minisign openssh-client iproute2 \
			sbsigntool openssl util-linux
	fi
}

# stop_qemu stops the VM, if it runs: the power loop first, so that it
# starts no qemu again (its trap takes its qemu along and removes the pid
# file), then that qemu, by the pid read before, should it still run.
stop_qemu() {
	local q=
	q=$(cat "$WORK/qemu.pid" 2>/dev/null || true)
	if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
		kill "$QEMU_PID" 2>/dev/null || true
	fi
	if [ -n "$q" ]; then
		kill "$q" 2>/dev/null || true
		sleep 1
		kill -9 "$q" 2>/dev/null || true
	fi
	rm -f "$WORK/qemu.pid"
	QEMU_PID=
}

# console prints the serial console so far, without CRs and colours.
console() { tr -d '\r' <"$LOG" | sed 's/\x1b\[[0-9;]*m//g'; }

# free_port sets SSH_PORT to a free loopback port.
free_port() {
	SSH_PORT=
	for p in $(shuf -i 20000-60000 -n 50); do
		ss -Hltn "sport = :$p" | grep -q . || { SSH_PORT=$p; return 0; }
	done
	echo "FAIL: no free port for SSH"
	exit 1
}

# Firmware: OVMF, or with SECURE_BOOT=1 OVMF's Secure Boot build, which
# needs SMM and a secure flash (its variables then enforce Secure Boot
# when they have keys enrolled).
SECURE_BOOT=0

# start_qemu DISK... boots the first disk (UEFI, OVMF with the variables
# in $WORK/vars.fd) with the others attached, the serial console going to
# $LOG and the node's sshd on 127.0.0.1:$SSH_PORT. A reboot inside the VM
# is a power cycle: qemu runs with -no-reboot, and a loop starts it again
# on the same disks and firmware variables, appending to the console. (A
# warm reset of OVMF under software emulation now and then hangs with no
# output at all; a cold start does not.) The loop ends when the node
# powers off. QEMU_PID is the loop's; stop_qemu ends both.
start_qemu() {
	local drives=() machine=q35 code=/usr/share/OVMF/OVMF_CODE.fd secure=()
	for d in "$@"; do
		drives+=(-drive "file=$d,format=raw,if=virtio")
	done
	if [ "$SECURE_BOOT" = 1 ]; then
		machine=q35,smm=on code=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd
		secure=(-global driver=cfi.pflash01,property=secure,value=on)
	fi
	: >"$LOG"
	(
		# Stopped: the qemu it runs goes too ($! is the last one started),
		# and the next stop_qemu finds no pid to kill.
		trap 'kill $! 2>/dev/null || true; rm -f "$WORK/qemu.pid"; exit 0' TERM
		while :; do
			qemu-system-x86_64 -machine "$machine" "${secure[@]}" -m 2048 -smp 2 -nographic -no-reboot \
				-chardev file,id=console,path="$LOG",append=on -serial chardev:console -monitor none \
				-drive if=pflash,format=raw,readonly=on,file="$code" \
				-drive if=pflash,format=raw,file="$WORK/vars.fd" \
				"${drives[@]}" \
				-nic user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:"$SSH_PORT"-:22 </dev/null >>"$WORK/qemu.out" 2>&1 &
			echo $! >"$WORK/qemu.pid"
			wait $! || { rm -f "$WORK/qemu.pid"; exit 1; }
			if ! tail -c 4096 "$LOG" | grep -aq 'reboot: Restarting system'; then
				rm -f "$WORK/qemu.pid"
				exit 0
			fi
			echo "strata boot test: power cycle after a reboot" >>"$LOG"
		done
	) &
	QEMU_PID=$!
}

# power_off shuts the node down cleanly (its file systems unmounted or
# read-only, their journals flushed), so that a command that then reads
# its disk offline (read-only first, without journal replay) sees what
# the node wrote; stop_qemu alone is pulling the plug.
power_off() {
	on_node systemctl poweroff || true
	local deadline=$(($(date +%s) + TIMEOUT))
	while [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; do
		[ "$(date +%s)" -lt "$deadline" ] || fail "the node did not power off"
		sleep 2
	done
	stop_qemu
}

# MARK is the console line a phase starts at: wait_for and no_failure
# look at the console from there on.
MARK=1

fail() {
	echo "FAIL: $*"
	echo "-- console (strata, failures):"
	console | grep -aE '\[FAILED\]|FAILED|Kernel panic|strata: |strata\[|STRATA-|bless|drift' | tail -n 60 || true
	echo "-- last lines:"
	console | tail -n 30
	exit 1
}

# mark starts a phase.
mark() { MARK=$(($(console | wc -l) + 1)); }

# wait_for WHAT TEXT...: waits until the console since the mark has every
# TEXT (fixed strings); a kernel panic or a stopped VM fails at once.
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

# no_failure WHAT: no unit, audit or activation failed since the mark.
no_failure() {
	if console | tail -n +"$MARK" | grep -aE '\[FAILED\]|FAILED:'; then
		fail "$1: a unit failed"
	fi
}

# boot DISK...: a fresh firmware, a free port, qemu; a new phase.
boot() {
	stop_qemu
	SECURE_BOOT=0
	cp /usr/share/OVMF/OVMF_VARS.fd "$WORK/vars.fd"
	free_port
	MARK=1
	start_qemu "$@"
	echo "   (console in $LOG; sshd on 127.0.0.1:$SSH_PORT)"
}

# boot_sb VARS DISK...: boot with OVMF's Secure Boot build and a copy of
# the variable store VARS (keys enrolled: Secure Boot enforcing).
boot_sb() {
	local vars=$1
	shift
	stop_qemu
	SECURE_BOOT=1
	cp "$vars" "$WORK/vars.fd"
	free_port
	MARK=1
	start_qemu "$@"
	echo "   (Secure Boot; console in $LOG; sshd on 127.0.0.1:$SSH_PORT)"
}

# on_node CMD...: runs CMD as root on the booted node over SSH (its host
# key pinned by ssh_up, root's key given at provisioning).
on_node() {
	ssh -q -i "$WORK/id" -o UserKnownHostsFile="$WORK/known_hosts" -o StrictHostKeyChecking=yes \
		-o BatchMode=yes -o ConnectTimeout=30 -p "$SSH_PORT" root@127.0.0.1 "$@"
}

# ssh_up waits for the node's sshd, with the host key its check unit
# printed on the console (made at first boot) as the only one known.
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
