#!/usr/bin/env bash
# Side-by-side benchmark of strata against the plain tools it wraps, in one
# run on one machine, reported as ratios (strata time / peer time):
#   build-image        vs  mksquashfs DIR       (same tree, same compressor)
#   overlay create     vs  tar -c | zstd        (same change)
#   create --compression xz vs tar -c | xz -6 -T1 (XZ_MB of random bytes,
#                           and as much text)
#   apply-overlay      vs  zstd -d | tar -x     (same payload; also with
#                           a final sync, since apply makes its writes durable)
#                           on a directory node and on an overlayfs node (the
#                           image mounted read-only, layers stacked; needs
#                           root, in a private mount namespace)
#   build-image of images/debian-node (cached base) vs mksquashfs of its tree
#   provision --disk   vs  dd conv=sparse of the disk it wrote (the same
#                           non-zero bytes into a file of the same size)
#   dm-verity tree     vs  veritysetup format (the Debian node image's
#                           blocks, same salt; a Go benchmark, medians of 5)
#   overlay size       vs  OSTree static delta (bytes, not seconds) for one
#                           byte appended to libc and for a config edit
#   status --inventory vs  parallel-ssh (50 sshd on loopback, same command)
#   repo push oci://   vs  oras push (same files, one registry on loopback)
#   apply --repo oci:// vs oras pull + apply-overlay --repo DIR
#   strata serve       vs  nginx (server CPU per 304 poll under wrk,
#                           keep-alive and a new connection per poll)
# and, without a peer, overlay create at depth 1 to 10,000 (DEPTHS),
# 2,000 agents polling one strata serve, and the memory of 200 real
# agent processes on one host (AGENTS).
# (DEBIAN=0 leaves out the Debian rows.)
# Each pair runs interleaved RUNS times; the table shows medians.
# Usage: scripts/bench.sh [path/to/strata]   (env: FILES, FILE_KB, CHANGED, RUNS, XZ_MB, DEBIAN, DEPTHS, AGENTS)
set -euo pipefail
S=$(realpath "${1:-bin/strata}")
SRC=$(pwd)   # the source tree (make bench runs from it), for the Go-side rows
FILES=${FILES:-4000}        # files in the base tree
FILE_KB=${FILE_KB:-24}      # average file size
CHANGED=${CHANGED:-400}     # files an overlay changes
RUNS=${RUNS:-5}
W=$(mktemp -d /tmp/strata-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"

# A synthetic tree: FILES files of mixed compressibility in 40 directories.
gen_tree() { # dir count kb seed
	python3 - "$@" <<'PY'
import os, random, sys
d, n, kb, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(seed)
words = [("w%05d" % i).encode() for i in range(4096)]
for i in range(n):
    sub = os.path.join(d, "usr/share/bench/d%02d" % (i % 40))
    os.makedirs(sub, exist_ok=True)
    size = max(1, int(rnd.expovariate(1 / (kb * 1024))))
    if i % 3 == 0:
        data = rnd.randbytes(size)                      # incompressible
    else:
        data = b" ".join(rnd.choice(words) for _ in range(size // 7 + 1))[:size]
    with open(os.path.join(sub, "f%05d" % i), "wb") as f:
        f.write(data)
PY
}
mkdir -p recipe/rootfs change/usr/share/bench
gen_tree recipe/rootfs "$FILES" "$FILE_KB" 1
# The change: CHANGED existing files rewritten.
python3 - recipe/rootfs change "$CHANGED" <<'PY'
import os, sys, random
base, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(2)
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(base) for f in fs)
for p in rnd.sample(files, n):
    rel = os.path.relpath(p, base)
    dst = os.path.join(out, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    data = open(p, "rb").read()
    open(dst, "wb").write(data[::-1] + b"changed\n")
PY
cat > recipe/recipe.yaml <<'Y'
line: bench
version: 1.0.0
epoch: 1767225600
compressor: zstd
base:
  dir: rootfs
files:
  - path: /var
    dir: true
  - path: /run
    dir: true
Y
$S key generate --out k >/dev/null
size=$(du -sm recipe/rootfs | cut -f1)

now() { date +%s.%N; }
declare -A T
time_it() { # name cmd...
	local name=$1; shift
	local t0 t1
	t0=$(now); "$@" >/dev/null 2>&1; t1=$(now)
	T[$name]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b-a}') "
}
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for i in $(seq "$RUNS"); do
	rm -rf img1 img2.squashfs
	time_it build "$S" build-image recipe/recipe.yaml --out img1 --key k.key
	time_it mksquashfs mksquashfs recipe/rootfs img2.squashfs -comp zstd -noappend -quiet -no-progress -all-root
done
"$S" repo init repo0 --image img1/bench-1.0.0.squashfs --key k.key >/dev/null
for i in $(seq "$RUNS"); do
	rm -rf repo && cp -a repo0 repo
	time_it create "$S" overlay create --repo repo --version 1.1.0 --key k.key --tree change
	time_it tarzstd sh -c "tar -C change -cf - . | zstd -q -3 -T1 -f -o change.tar.zst"
	# strata syncs the overlay it publishes before the index names it;
	# this peer does the same for its tarball.
	time_it tarzstdsync sh -c "tar -C change -cf - . | zstd -q -3 -T1 -f -o change2.tar.zst && sync -f change2.tar.zst"
done
rm -rf repo && cp -a repo0 repo
"$S" overlay create --repo repo --version 1.1.0 --key k.key --tree change >/dev/null 2>&1
ov=repo/overlays/bench-1.1.0.overlay.tar.zst
"$S" provision --image img1/bench-1.0.0.squashfs --root node0 >/dev/null 2>&1
for i in $(seq "$RUNS"); do
	rm -rf node x y
	cp -a node0 node
	mkdir x y
	sync # start every run with a clean page cache writeback state
	time_it apply "$S" apply-overlay --root node "$ov" --restart-with none
	time_it untar sh -c "zstd -dc change.tar.zst | tar -C x -xf -"
	# strata makes the applied files durable (syncfs) before its ledger
	# commits; this peer does the same for tar.
	time_it untarsync sh -c "zstd -dc change.tar.zst | tar -C y -xf - && sync -f y"
done

# The overlayfs backend: a node booting the image read-only, its state
# in a directory, /usr a stack; apply writes the layer once and switches.
# Each run is timed inside a private mount namespace (nothing leaks).
for i in $(seq "$RUNS"); do
	rm -rf ofs && mkdir -p ofs/root
	"$S" provision --image img1/bench-1.0.0.squashfs --state ofs/state >/dev/null
	sync
	unshare -m --propagation private bash -c '
		set -e
		mount -o loop,ro img1/bench-1.0.0.squashfs ofs/root
		mount --bind ofs/state/var ofs/root/var
		mount -t tmpfs tmpfs ofs/root/run
		"$1" activate --root ofs/root >/dev/null
		t0=$(date +%s.%N)
		"$1" apply-overlay --root ofs/root "$2" --restart-with none >/dev/null 2>&1
		t1=$(date +%s.%N)
		awk -v a="$t0" -v b="$t1" "BEGIN{printf \"%.4f\", b-a}" > ofs/time
		umount -R -l ofs/root
	' bench "$S" "$ov"
	T[applyofs]+="$(cat ofs/time) "
	rm -rf y && mkdir y && sync
	time_it untarsync2 sh -c "zstd -dc change.tar.zst | tar -C y -xf - && sync -f y"
done

# xz (issue 24): overlay create --compression xz of one new file of
# XZ_MB megabytes, incompressible (random) and compressible (words),
# against tar -c | xz at strata's settings (-6, one thread).
XZ_MB=${XZ_MB:-48}
mkdir -p xzrand/usr/share/xz xztext/usr/share/xz
head -c "$((XZ_MB * 1000000))" /dev/urandom >xzrand/usr/share/xz/blob
python3 - xztext/usr/share/xz/blob "$XZ_MB" <<'PY'
import random, sys
rnd = random.Random(3)
words = [("w%05d" % i).encode() for i in range(4096)]
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2]) * 10):
        f.write(b" ".join(rnd.choice(words) for _ in range(100000 // 7))[:100000])
PY
for i in $(seq "$RUNS"); do
	for kind in rand text; do
		rm -rf repo && cp -a repo0 repo
		time_it "xz$kind" "$S" overlay create --repo repo --version 1.1.0 --key k.key --tree "xz$kind" --compression xz
		time_it "xzcli$kind" sh -c "tar -C xz$kind -cf - . | xz -6 -T1 -c >xz$kind.tar.xz"
	done
done

# The Debian node image (issue 3): build-image from the cached base and
# run steps vs mksquashfs of the same tree with the same compressor, and
# provision --disk vs dd writing the same number of bytes. Needs root; the
# first build (untimed) fills the cache if it is cold (network, a minute).
DEBIAN=${DEBIAN:-1}
if [ "$DEBIAN" = 1 ]; then
	export STRATA_CACHE=${STRATA_CACHE:-/var/cache/strata-test}
	recipe_dn="$(dirname "$S")/../images/debian-node/recipe.yaml"
	[ -f "$recipe_dn" ] || recipe_dn="$(cd "$(dirname "$0")/.." && pwd)/images/debian-node/recipe.yaml"
	"$S" build-image "$recipe_dn" --out dn0 --key k.key >/dev/null 2>&1
	img=dn0/debian-node-1.0.0.squashfs
	rdsquashfs -u / -p dntree "$img" >/dev/null 2>&1 # the same tree, owners and modes kept
	dnsize=$(du -sm dntree | cut -f1)
	disksize=$(( ($(stat -c %s "$img") * 4 / 1048576 + 1024) ))M
	for i in $(seq "$RUNS"); do
		rm -rf dn1 dn2.squashfs disk1.img disk2.img
		time_it dnbuild "$S" build-image "$recipe_dn" --out dn1 --key k.key
		time_it dnmksq mksquashfs dntree dn2.squashfs -comp zstd -noappend -quiet -no-progress
		time_it disk "$S" provision --image "$img" --disk disk1.img --size "$disksize" --node-id bench
		time_it dd dd if=disk1.img of=disk2.img bs=4M conv=sparse status=none
	done
	# The dm-verity tree of the same image (mksquashfs's, which has none
	# appended): strata's Go tree beside veritysetup format (issue 23).
	( cd "$SRC" && STRATA_BENCH_IMAGE="$W/dn2.squashfs" STRATA_BENCH_REPORT="$W/verity.txt" go test ./internal/verity -run '^$' -bench '^BenchmarkAgainstVeritysetup$' -benchtime 1x >/dev/null )

	# Payload sizes on the same image: what strata ships for a change
	# (the overlay file) against what OSTree ships for it (the static
	# delta between the two commits, --inline: one file). Two changes:
	# one byte appended to libc (a large binary whose old version the
	# node has), and a config-only change (nginx.conf).
	libc=usr/lib/x86_64-linux-gnu/libc.so.6 conf=etc/nginx/nginx.conf
	cp "dntree/$libc" libc.new && printf x >>libc.new
	sed 's/worker_connections 768/worker_connections 1024/' "dntree/$conf" >conf.new
	cmp -s conf.new "dntree/$conf" && { echo "bench: $conf has no worker_connections 768" >&2; exit 1; }
	"$S" repo init dnrepo --image "$img" --key k.key >/dev/null
	"$S" overlay create --repo dnrepo --version 1.0.1 --key k.key --add "/$libc=libc.new" >/dev/null
	"$S" overlay create --repo dnrepo --version 1.0.2 --key k.key --add "/$conf=conf.new" >/dev/null
	sz_libc=$(stat -c %s dnrepo/overlays/debian-node-1.0.1.overlay.tar.zst)
	sz_conf=$(stat -c %s dnrepo/overlays/debian-node-1.0.2.overlay.tar.zst)
	ostree --repo=ost init --mode=archive
	commit() { ostree --repo=ost commit --branch=node --tree=dir=dntree --timestamp=2026-01-01T00:00:00Z >/dev/null && ostree --repo=ost rev-parse node; }
	c0=$(commit)
	cp libc.new "dntree/$libc" && c1=$(commit)
	cp conf.new "dntree/$conf" && c2=$(commit)
	ostree --repo=ost static-delta generate --from="$c0" --to="$c1" --inline --filename=delta-libc >/dev/null
	ostree --repo=ost static-delta generate --from="$c1" --to="$c2" --inline --filename=delta-conf >/dev/null
	os_libc=$(stat -c %s delta-libc) os_conf=$(stat -c %s delta-conf)
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
printf '\nstrata benchmark: %d files, %d MB tree, %d changed files, %d runs (medians)\n\n' "$FILES" "$size" "$CHANGED" "$RUNS"
printf '%-16s %10s   %-22s %10s   %6s\n' "strata" "seconds" "peer" "seconds" "ratio"
row() { # label key peerlabel peerkey
	local a b; a=$(median "${T[$2]}"); b=$(median "${T[$4]}")
	printf '%-16s %10.3f   %-22s %10.3f   %6sx\n' "$1" "$a" "$3" "$b" "$(ratio "$a" "$b")"
}
row "build-image" build "mksquashfs DIR" mksquashfs
row "overlay create" create "tar -c | zstd" tarzstd
row "overlay create" create "tar -c | zstd; sync" tarzstdsync
row "apply-overlay" apply "zstd -d | tar -x" untar
row "apply-overlay" apply "zstd -d | tar -x; sync" untarsync
row "apply (overlayfs)" applyofs "zstd -d | tar -x; sync" untarsync2
row "create xz random" xzrand "tar -c | xz -6 -T1" xzclirand
row "create xz text" xztext "tar -c | xz -6 -T1" xzclitext
if [ "$DEBIAN" = 1 ]; then
	printf '\nDebian node image: %d MB tree, disk of %s\n\n' "$dnsize" "$disksize"
	row "build-image" dnbuild "mksquashfs DIR" dnmksq
	row "provision --disk" disk "dd conv=sparse" dd
	printf '%s\n' "$(cat "$W/verity.txt")"
	printf '\nPayload for one change (bytes; strata overlay vs OSTree static delta, --inline)\n\n'
	printf '%-28s %10s %10s %8s\n' "change" "strata" "ostree" "ratio"
	size_row() { printf '%-28s %10d %10d %7sx\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
	size_row "libc.so.6 + 1 byte" "$sz_libc" "$os_libc"
	size_row "nginx.conf (config only)" "$sz_conf" "$os_conf"
fi

# Publishing at depth (issue 8): one small overlay published at the head
# of a line of N overlays, N up to 10,000 (building that line takes a few
# minutes); the cost must stay flat as the line grows.
printf '\nPublishing one overlay at depth N (overlay create, Go benchmark):\n'
( cd "$SRC" && STRATA_BENCH_DEPTHS=${DEPTHS:-1,1000,10000} go test ./overlay -run '^$' -bench '^BenchmarkCreateAtDepth$' -benchtime 20x -timeout 60m ) | awk '/^BenchmarkCreateAtDepth/ {sub(/^BenchmarkCreateAtDepth\//, ""); sub(/-[0-9]+$/, "", $1); printf "  %-14s %8.1f ms wall %8.1f ms CPU\n", $1, $3/1e6, $5}'

# A rollout to 200 simulated nodes over SSH (fleet BenchmarkRollout200:
# in-process sshd-alike servers on loopback, 25% at a time).
printf '\nRollout to 200 nodes over SSH (go test ./fleet -bench Rollout200, 5x):\n'
( cd "$SRC" && go test ./fleet -run '^$' -bench '^BenchmarkRollout200$' -benchtime 5x ) | awk '/^BenchmarkRollout200/ {printf "  %-14s %8.1f ms wall %8.1f ms CPU\n", "rollout", $3/1e6, $5}'

# Strict decoding (issue 24): a 4,000-entry image manifest, Decode (names,
# unknown fields, trailing data checked) against json.Unmarshal alone, 5
# rounds with the two alternating; medians.
printf '\nStrict manifest decode, 4,000 entries (go test ./manifests -bench DecodeImageManifest, 5 rounds):\n'
dec_s="" dec_p=""
for i in 1 2 3 4 5; do
	out=$(cd "$SRC" && go test ./manifests -run '^$' -bench '^BenchmarkDecodeImageManifest(Plain)?$' -benchtime 30x)
	dec_s="$dec_s $(awk '$1 ~ /^BenchmarkDecodeImageManifest-/ {print $3/1e6}' <<<"$out")"
	dec_p="$dec_p $(awk '$1 ~ /^BenchmarkDecodeImageManifestPlain-/ {print $3/1e6}' <<<"$out")"
done
a=$(median "$dec_s") b=$(median "$dec_p")
printf '  %-28s %8.2f ms   %-16s %8.2f ms   %6sx\n' "manifests.Decode" "$a" "json.Unmarshal" "$b" "$(ratio "$a" "$b")"

# Fleet scale: 2,000 simulated agents polling one strata serve over
# loopback (internal/serve TestScale2000Agents); its report, not a ratio:
# an unchanged poll has no peer but "one small response".
printf '\nFleet: '
( cd "$SRC" && STRATA_SCALE_REPORT="$W/scale.txt" go test ./internal/serve -run '^TestScale2000Agents$' -count=1 >/dev/null ) && cat "$W/scale.txt"

# Fleet status over real agents (issue 22): fleet.Status against 1,000
# in-process agents, each over a node of its own on a listener of its
# own, beside a plain parallel HTTP client fetching the same health
# documents, rounds alternating; medians and the ratio (aim: within 2x).
printf '\nFleet status: '
( cd "$SRC" && STRATA_BENCH_REPORT="$W/status.txt" go test ./agent -run '^$' -bench '^BenchmarkStatusOverAgents$' -benchtime 1x -timeout 30m >/dev/null ) && cat "$W/status.txt"

# side SCRIPT LINES: one of the side-by-side scripts, RUNS runs; the
# last LINES lines of its report, or the end of what it said on failing.
side() {
	if RUNS=$RUNS "$SRC/scripts/$1" "$S" >"$W/$1.out" 2>"$W/$1.err"; then
		tail -n "$2" "$W/$1.out"
	else
		echo "$1 failed:"
		tail -n 20 "$W/$1.err"
	fi
}

# Fleet fan-out over SSH (issue 9): strata status --inventory against
# parallel-ssh running the same remote command on the same sshd targets.
printf '\nFleet fan-out over SSH (scripts/bench-fleet.sh, medians of %d runs):\n' "$RUNS"
side bench-fleet.sh 1

# A repository in an OCI registry (issue 24): repo push and apply-overlay
# --repo oci:// against the ORAS CLI on the same artifact, one real
# registry on loopback.
printf '\nOCI registry (scripts/bench-oci.sh, medians of %d runs):\n' "$RUNS"
side bench-oci.sh 4

# strata serve beside nginx (issue 24): the server's CPU per unchanged
# poll (304), keep-alive and a new connection per poll, under wrk.
printf '\nServing polls (scripts/bench-serve.sh, medians of %d runs):\n' "$RUNS"
side bench-serve.sh 2

# Agent memory (issue 24): AGENTS real agent processes (default 200), each
# over a node of its own, polling one strata serve; RSS and PSS per agent.
printf '\nAgent memory (scripts/bench-agents.sh):\n'
side bench-agents.sh 6
