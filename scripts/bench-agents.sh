#!/usr/bin/env bash
# Agent memory with a fleet's worth of agents on one host (issue 24):
# AGENTS real `strata agent` processes (default 200), each over a directory
# node of the demo image of its own, with the flags' defaults an operator
# runs (--interval 2m, --jitter 20%), polling one `strata serve` of the
# demo repository over loopback, each with its health listener. The
# repository is one overlay ahead, so every agent's first poll applies it
# (--restart-with none: the nodes have no systemd); once all of them run
# the head, /health and /metrics of each are scraped once, as a monitor
# would, and after SETTLE seconds each agent's memory is read from /proc:
# VmRSS, RssAnon and RssFile (status) and Pss (smaps_rollup, which shares
# the binary's pages among the agents mapping them). No peer: the row's
# aim is an RSS (docs/benchmarks.md).
#
#   scripts/bench-agents.sh [path/to/strata]   (env: AGENTS=200, SETTLE=10)
#
# Needs python3 and curl (scripts/deps.sh installs both).
set -euo pipefail
S=$(realpath "${1:-bin/strata}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
AGENTS=${AGENTS:-200}
SETTLE=${SETTLE:-10}
for t in python3 curl ss; do
	command -v "$t" >/dev/null || { echo "bench-agents: $t is required (scripts/deps.sh installs it)" >&2; exit 1; }
done
W=$(mktemp -d /tmp/strata-bench-agents.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT
cd "$W"

# run CMD...: a setup step, quiet unless it fails.
run() { "$@" >setup.log 2>&1 || { echo "bench-agents: $* failed:" >&2; tail -n 20 setup.log >&2; exit 1; }; }
run "$S" key generate --out k
run "$S" build-image "$SRC/images/demo/recipe.yaml" --out img --key k.key
run "$S" repo init repo --image img/demo-1.0.0.squashfs --key k.key
printf 'listen 8081\nroot /usr/share/demo/www\n' >web.conf
run "$S" overlay create --repo repo --version 1.0.1 --key k.key --add /etc/demo/web.conf=web.conf
run "$S" provision --image img/demo-1.0.0.squashfs --root node0

# Loopback ports below the ephemeral range, free when taken: one for the
# repository, one per agent.
read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
ports=()
for p in $(shuf -i 10000-$((eph - 1)) -n $((AGENTS * 4))); do
	[ ${#ports[@]} -le "$AGENTS" ] || break
	ss -Hltn "sport = :$p" | grep -q . || ports+=("$p")
done
[ ${#ports[@]} -gt "$AGENTS" ] || { echo "bench-agents: not enough free ports" >&2; exit 1; }
repo_port=${ports[0]}
"$S" serve repo --listen "127.0.0.1:$repo_port" 2>serve.log &
PIDS+=($!)
for _ in $(seq 100); do
	curl -fsS -o /dev/null "http://127.0.0.1:$repo_port/index.json" 2>/dev/null && break
	sleep 0.1
done

agent_pids=()
for i in $(seq "$AGENTS"); do
	cp -a node0 "node$i"
	"$S" agent --root "node$i" --repo "http://127.0.0.1:$repo_port/" \
		--listen "127.0.0.1:${ports[$i]}" --restart-with none 2>"agent$i.log" &
	PIDS+=($!)
	agent_pids+=($!)
done

# Every agent at the head (its first poll applied 1.0.1), or the log of
# the first that is not after 5 minutes.
deadline=$((SECONDS + 300))
for i in $(seq "$AGENTS"); do
	until curl -fsS "http://127.0.0.1:${ports[$i]}/health" 2>/dev/null | grep -q '"version": *"1.0.1"'; do
		if [ $SECONDS -ge $deadline ] || ! kill -0 "${agent_pids[$((i - 1))]}" 2>/dev/null; then
			echo "bench-agents: agent $i did not reach 1.0.1:" >&2
			tail -n 20 "agent$i.log" >&2
			exit 1
		fi
		sleep 0.2
	done
done
for i in $(seq "$AGENTS"); do
	curl -fsS -o /dev/null "http://127.0.0.1:${ports[$i]}/health"
	curl -fsS -o /dev/null "http://127.0.0.1:${ports[$i]}/metrics"
done
sleep "$SETTLE"

# KiB per agent: VmRSS RssAnon RssFile Pss
for p in "${agent_pids[@]}"; do
	kill -0 "$p" 2>/dev/null || { echo "bench-agents: agent $p exited" >&2; exit 1; }
	printf '%s %s\n' \
		"$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s ", $2}' "/proc/$p/status")" \
		"$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup")"
done >mem.txt
python3 - "$AGENTS" "$(stat -c %s "$S")" mem.txt <<'PY'
import statistics, sys
n, size, rows = int(sys.argv[1]), int(sys.argv[2]), [list(map(int, l.split())) for l in open(sys.argv[3])]
def col(i): return [r[i] / 1024 for r in rows]
def line(name, i):
    v = col(i)
    print("  %-30s median %6.1f MiB   min %6.1f   max %6.1f" % (name, statistics.median(v), min(v), max(v)))
print("  %d agents at the head, binary %.1f MB" % (n, size / 1e6))
line("RSS (VmRSS; aim <= 12 MiB)", 0)
line("anonymous (RssAnon)", 1)
line("the binary's pages (RssFile)", 2)
line("PSS (shared pages divided)", 3)
print("  %-30s %6.0f MiB, %.1f MiB per agent" % ("PSS of all agents", sum(col(3)), sum(col(3)) / n))
PY
