#!/bin/sh
# make unit: the core's tests in -short mode, with every external tool the
# full suite uses replaced by one that fails, so nothing passes by calling
# one. Tests that need a tool, a kernel mount or systemd skip under -short
# (testenv); `make test` runs them.
set -eu
GO=${GO:-go}
# Run by a user other than root, the tests run as root of a user
# namespace of their own (that user's uid mapped to 0), so the nodes they
# build can hold root-owned files; what needs the real root (device
# nodes, other owners, the sandbox) skips there (testenv.RequireRoot).
if [ "$(id -u)" != 0 ] && [ -z "${STRATA_UNIT_USERNS:-}" ]; then
	STRATA_UNIT_USERNS=1 exec unshare --user --map-root-user "$0" "$@"
fi
shims=$(mktemp -d)
trap 'rm -rf "$shims"' EXIT
for t in mksquashfs sqfs2tar rdsquashfs unsquashfs tar2sqfs gensquashfs \
	mount umount unshare nsenter chroot losetup mkfs.ext4 mkfs.vfat e2fsck debugfs fsck.vfat mcopy mdir \
	systemctl systemd-run systemd-nspawn ssh sshd ssh-keygen debootstrap apt-get qemu-system-x86_64 \
	veritysetup sbsign sbverify sbattach fsck.erofs cpio zstd xz tar docker podman oras registry prometheus; do
	printf '#!/bin/sh\necho "%s: not available under make unit" >&2\nexit 127\n' "$t" >"$shims/$t"
	chmod +x "$shims/$t"
done
PATH="$shims:$PATH" exec "$GO" test -short -count=1 "$@" ./...
