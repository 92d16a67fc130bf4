# Shared by the boot tests (scripts/boot-test.sh, boot-test-upgrade.sh):
# sourced, not run. Needs $WORK (work directory) and $BIN (strata).

LOG=$WORK/console.log
QEMU_PID=

need() { command -v "$1" >/dev/null 2>&1; }

# boot_deps installs what booting a disk under qemu needs.
boot_deps() {
	if ! need qemu-system-x86_64 || [ ! -f /usr/share/OVMF/OVMF_CODE.fd ] ||
		[ ! -f /usr/lib/systemd/boot/efi/systemd-bootx64.efi ] || ! need mcopy ||
		! need mkfs.fat || ! need mkfs.ext4 || ! need debootstrap || ! need mksquashfs ||
		! need ssh-keygen || ! need ss; then
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-x86 ovmf systemd-boot-efi \
			mtools dosfstools e2fsprogs debootstrap squashfs-tools zstd minisign openssh-client iproute2
	fi
}

# stop_qemu stops the VM, if it runs.
stop_qemu() {
	if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
		kill "$QEMU_PID" 2>/dev/null || true
		sleep 1
		kill -9 "$QEMU_PID" 2>/dev/null || true
	fi
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

# start_qemu DISK... boots the first disk (UEFI, OVMF with the variables
# in $WORK/vars.fd) with the others attached, the serial console going to
# $LOG and the node's sshd on 127.0.0.1:$SSH_PORT. A reboot inside the VM
# keeps the same qemu running.
start_qemu() {
	local drives=()
	for d in "$@"; do
		drives+=(-drive "file=$d,format=raw,if=virtio")
	done
	: >"$LOG"
	qemu-system-x86_64 -machine q35 -m 2048 -smp 2 -nographic \
		-serial "file:$LOG" -monitor none \
		-drive if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE.fd \
		-drive if=pflash,format=raw,file="$WORK/vars.fd" \
		"${drives[@]}" \
		-nic user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:"$SSH_PORT"-:22 </dev/null >"$WORK/qemu.out" 2>&1 &
	QEMU_PID=$!
}
