#!/usr/bin/env bash
# A repository in an OCI registry, side by side with oras (the ORAS CLI),
# in one run against one real registry (Debian's docker-registry) on
# loopback:
#   repo push REPO oci://...       vs  oras push of the same files, titled
#                                      with the same paths, same artifact type
#   apply-overlay --repo oci://... vs  oras pull of the same artifact into a
#                                      directory, then apply-overlay --repo DIR
# The repository: the demo image and OVERLAYS overlays after it, each
# adding FILES_PER files of about 48 KiB (one in three random). Every push
# goes to a repository name of its own (nothing already uploaded), every
# apply to a fresh copy of one provisioned node. Medians of RUNS
# interleaved runs, as ratios (strata / oras).
#
#   scripts/bench-oci.sh [path/to/strata]   (env: OVERLAYS=50, FILES_PER=8, RUNS=5)
#
# Needs docker-registry and oras (scripts/deps.sh installs both).
set -euo pipefail
S=$(realpath "${1:-bin/strata}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
OVERLAYS=${OVERLAYS:-50}
FILES_PER=${FILES_PER:-8}
RUNS=${RUNS:-5}
for t in docker-registry oras python3; do
	command -v "$t" >/dev/null || { echo "bench-oci: $t is required (scripts/deps.sh installs it)" >&2; exit 1; }
done
W=$(mktemp -d /tmp/strata-bench-oci.XXXXXX)
REG_PID=""
cleanup() {
	[ -z "$REG_PID" ] || { kill "$REG_PID" 2>/dev/null || true; wait "$REG_PID" 2>/dev/null || true; }
	rm -rf "$W"
}
trap cleanup EXIT
cd "$W"

# The registry, on a free loopback port.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
REG=127.0.0.1:$port
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' "$W/registry" "$REG" >registry.yml
docker-registry serve registry.yml >registry.log 2>&1 &
REG_PID=$!
for _ in $(seq 100); do
	curl -fsS "http://$REG/v2/" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "http://$REG/v2/" >/dev/null || { echo "bench-oci: the registry did not start:" >&2; cat registry.log >&2; exit 1; }

# The repository.
"$S" key generate --out k >/dev/null
"$S" build-image "$SRC/images/demo/recipe.yaml" --out img --key k.key >/dev/null 2>&1
img=$(ls img/*.squashfs)
"$S" repo init repo --image "$img" --key k.key >/dev/null
python3 - "$OVERLAYS" "$FILES_PER" <<'PY'
import os, random, sys
n, per = int(sys.argv[1]), int(sys.argv[2])
rnd = random.Random(5)
words = [("w%05d" % i).encode() for i in range(4096)]
for v in range(1, n + 1):
    d = "change%d/usr/share/bench/v%d" % (v, v)
    os.makedirs(d)
    for i in range(per):
        size = 48 * 1024
        data = rnd.randbytes(size) if i % 3 == 0 else b" ".join(rnd.choice(words) for _ in range(size // 7 + 1))[:size]
        open(os.path.join(d, "f%d" % i), "wb").write(data)
PY
for v in $(seq "$OVERLAYS"); do
	"$S" overlay create --repo repo --version "1.0.$v" --key k.key --tree "change$v" >/dev/null
done
"$S" provision --image "$img" --root node0 >/dev/null 2>&1
files=$(cd repo && find . -type f ! -name .lock | sed 's|^\./||' | sort)
mb=$(du -sm repo | cut -f1)

now() { date +%s.%N; }
declare -A T
time_it() { # name cmd...
	local name=$1; shift
	local t0 t1
	t0=$(now)
	"$@" >/dev/null 2>>errors.log || { echo "bench-oci: $name failed:" >&2; tail -n 20 errors.log >&2; exit 1; }
	t1=$(now)
	T[$name]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b-a}') "
}
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

orasapply() { # ref dir node
	oras pull --plain-http -o "$2" "$1" && "$S" apply-overlay --root "$3" --repo "$2" --restart-with none
}
for i in $(seq "$RUNS"); do
	time_it push "$S" repo push repo "oci://$REG/strata$i:latest"
	# shellcheck disable=SC2086 # one argument per file
	time_it oraspush sh -c 'cd repo && exec oras push --plain-http --artifact-type application/vnd.strata.repository.v1 "$@"' oras "$REG/oras$i:latest" $files
	rm -rf node1 node2 pulled && cp -a node0 node1 && cp -a node0 node2
	sync
	time_it apply "$S" apply-overlay --root node1 --repo "oci://$REG/strata$i:latest" --restart-with none
	time_it orasapply orasapply "$REG/strata$i:latest" pulled node2
	cmp -s <("$S" status --root node1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["head"]["version"])') <(echo "1.0.$OVERLAYS") ||
		{ echo "bench-oci: the node did not reach 1.0.$OVERLAYS" >&2; exit 1; }
done

printf 'OCI registry: %d overlays of %d files, %d MB repository, %d runs (medians)\n\n' "$OVERLAYS" "$FILES_PER" "$mb" "$RUNS"
row() { # label key peerlabel peerkey
	local a b; a=$(median "${T[$2]}"); b=$(median "${T[$4]}")
	printf '%-26s %8.3f   %-30s %8.3f   %6sx\n' "$1" "$a" "$3" "$b" "$(ratio "$a" "$b")"
}
row "repo push oci://" push "oras push" oraspush
row "apply-overlay --repo oci://" apply "oras pull + apply --repo DIR" orasapply
