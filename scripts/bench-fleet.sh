#!/usr/bin/env bash
# Fleet fan-out over SSH, side by side with its peer, in one run: asking N
# nodes for their health with `strata status --inventory` (strata's own
# SSH client, golang.org/x/crypto/ssh, 64 nodes at a time) against
# parallel-ssh (Debian's pssh: one OpenSSH client process per node, 64 at
# a time) running the same remote command. The N nodes are N sshd
# processes on loopback ports of this host (root logs in with a key made
# here; host keys checked by both), each answering with the health
# document of one directory node provisioned from the demo image (made
# once by strata health, then printed by cat: on one 2-core machine, N
# strata processes at once would measure the nodes, not the clients), so
# the remote work is identical and small and what differs is the client
# side: connections, handshakes, sessions, reading the answers. Medians of
# RUNS interleaved runs, as a ratio (strata / parallel-ssh).
#
#   scripts/bench-fleet.sh [path/to/strata]   (env: NODES=50, RUNS=5)
#
# Needs root, /usr/sbin/sshd and parallel-ssh (scripts/deps.sh installs
# them; the host's own ssh service is not started).
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "bench-fleet: needs root (it starts sshd)" >&2; exit 1; }
S=$(realpath "${1:-bin/strata}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
NODES=${NODES:-50}
RUNS=${RUNS:-5}
W=$(mktemp -d /tmp/strata-bench-fleet.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
cd "$W"

"$S" key generate --out k >/dev/null
"$S" build-image "$SRC/images/demo/recipe.yaml" --out img --key k.key >/dev/null 2>&1
"$S" provision --image img/demo-1.0.0.squashfs --root node >/dev/null
# The remote command of both tools: the health of that node, whatever
# root the caller names (every "node" is this host).
"$S" health --root node >health.json
cat >strata-node <<EOF
#!/bin/sh
exec cat "$W/health.json"
EOF
chmod 0755 strata-node

ssh-keygen -q -t ed25519 -N "" -f hostkey
ssh-keygen -q -t ed25519 -N "" -f id
# Remote commands run with a home of the benchmark's own: the host's
# root dotfiles (a ~/.bashrc that starts language tool managers, which
# Debian's bash reads for commands over ssh) are not what is measured.
mkdir -p home
printf 'environment="HOME=%s/home" %s\n' "$W" "$(cat id.pub)" >authorized_keys
mkdir -p /run/sshd
: >known_hosts
: >hosts
printf 'nodes:\n' >inventory.yaml
# Free loopback ports, one per node, below the ephemeral range: a port
# there can be taken between the check and sshd's bind by an outgoing
# connection (the bench rows before this one open tens of thousands).
read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
ports=()
for p in $(shuf -i 10000-$((eph - 1)) -n $((NODES * 4))); do
	[ ${#ports[@]} -lt "$NODES" ] || break
	ss -Hltn "sport = :$p" | grep -q . || ports+=("$p")
done
[ ${#ports[@]} -eq "$NODES" ] || { echo "bench-fleet: not enough free ports" >&2; exit 1; }
hostkey=$(cut -d' ' -f1-2 hostkey.pub)
for i in "${!ports[@]}"; do
	p=${ports[$i]}
	/usr/sbin/sshd -D -f /dev/null -p "$p" -h "$W/hostkey" \
		-o ListenAddress=127.0.0.1 -o AuthorizedKeysFile="$W/authorized_keys" -o StrictModes=no \
		-o PidFile=none -o UsePAM=no -o PermitRootLogin=prohibit-password -o MaxStartups=200 -o PermitUserEnvironment=yes \
		-o PasswordAuthentication=no -o LogLevel=ERROR 2>>sshd.log &
	PIDS+=($!)
	printf '[127.0.0.1]:%s %s\n' "$p" "$hostkey" >>known_hosts
	printf 'root@127.0.0.1:%s\n' "$p" >>hosts
	printf '  - name: n%03d\n    address: 127.0.0.1:%s\n' "$i" "$p" >>inventory.yaml
done
# Wait until every sshd listens.
for _ in $(seq 100); do
	up=0
	for p in "${ports[@]}"; do ss -Hltn "sport = :$p" | grep -q . && up=$((up + 1)); done
	[ "$up" -eq "$NODES" ] && break
	sleep 0.1
done
[ "$up" -eq "$NODES" ] || { echo "bench-fleet: $up of $NODES sshd listen after 10 s" >&2; cat sshd.log >&2; exit 1; }

strata_run() {
	"$S" status --inventory inventory.yaml --known-hosts known_hosts --identity id --remote-strata "$W/strata-node" --timeout 60s --json >out.json
	# Every node answered.
	[ "$(grep -c '"state": "current"' out.json)" -eq "$NODES" ]
}
pssh_run() {
	parallel-ssh -h hosts -p 64 -t 60 -i -x "-i $W/id -o UserKnownHostsFile=$W/known_hosts -o StrictHostKeyChecking=yes -o BatchMode=yes -o IdentitiesOnly=yes" \
		"$W/strata-node" >out.txt
	[ "$(grep -c '"version"' out.txt)" -ge "$NODES" ]
}
strata_run || { echo "bench-fleet: strata status failed" >&2; cat out.json >&2; exit 1; }
pssh_run || { echo "bench-fleet: parallel-ssh failed" >&2; tail -20 out.txt >&2; cat sshd.log >&2; exit 1; }

now() { date +%s.%N; }
a=() b=()
for _ in $(seq "$RUNS"); do
	t0=$(now); strata_run; t1=$(now); pssh_run; t2=$(now)
	a+=("$(awk -v x="$t0" -v y="$t1" 'BEGIN{printf "%.4f", y-x}')")
	b+=("$(awk -v x="$t1" -v y="$t2" 'BEGIN{printf "%.4f", y-x}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ma=$(median "${a[@]}") mb=$(median "${b[@]}")
printf '%-34s %8.3f s   %-30s %8.3f s   %5sx\n' "strata status --inventory ($NODES)" "$ma" "parallel-ssh, same command" "$mb" \
	"$(awk -v x="$ma" -v y="$mb" 'BEGIN{printf "%.2f", x/y}')"
