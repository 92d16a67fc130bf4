#!/usr/bin/env bash
# strata serve beside nginx, the server an operator would put in its place,
# in one run on loopback: the server's CPU time per unchanged poll (an
# agent's GET of index.json with If-None-Match naming its ETag, answered
# 304), over held keep-alive connections and with a new connection per
# poll. Both serve the same repository directory; nginx runs one worker
# with its defaults (etag on) and no access log (strata serve logs no
# requests either). Load: wrk, one thread, CONNS connections, DURATION
# per run; the CPU is the server's own (utime + stime of every process of
# it, from /proc), divided by the polls wrk completed. Medians of RUNS
# interleaved runs, as ratios (strata / nginx).
#
#   scripts/bench-serve.sh [path/to/strata]   (env: RUNS=5, CONNS=32, DURATION=5s)
#
# Needs nginx and wrk (scripts/deps.sh installs both).
set -euo pipefail
S=$(realpath "${1:-bin/strata}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-5}
CONNS=${CONNS:-32}
DURATION=${DURATION:-5s}
PATH=$PATH:/usr/sbin:/sbin
for t in nginx wrk python3 curl; do
	command -v "$t" >/dev/null || { echo "bench-serve: $t is required (scripts/deps.sh installs it)" >&2; exit 1; }
done
W=$(mktemp -d /tmp/strata-bench-serve.XXXXXX)
chmod 755 "$W"
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT
cd "$W"
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
up() {
	for _ in $(seq 100); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-serve: $2 did not start:" >&2
	cat "$3" >&2
	exit 1
}

# The repository: the demo image, signed.
"$S" key generate --out k >/dev/null
"$S" build-image "$SRC/images/demo/recipe.yaml" --out img --key k.key >/dev/null 2>&1
"$S" repo init repo --image "$(ls img/*.squashfs)" --key k.key >/dev/null
chmod -R a+rX repo

sport=$(freeport)
"$S" serve repo --listen "127.0.0.1:$sport" >serve.log 2>&1 &
PIDS+=($!)
spid=$!
up "http://127.0.0.1:$sport/index.json" "strata serve" serve.log

nport=$(freeport)
mkdir -p nginx/tmp
cat >nginx/nginx.conf <<EOF
daemon off;
worker_processes 1;
pid $W/nginx/nginx.pid;
error_log $W/nginx/error.log warn;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $W/nginx/tmp;
	proxy_temp_path $W/nginx/tmp;
	fastcgi_temp_path $W/nginx/tmp;
	uwsgi_temp_path $W/nginx/tmp;
	scgi_temp_path $W/nginx/tmp;
	server {
		listen 127.0.0.1:$nport;
		root $W/repo;
		etag on;
	}
}
EOF
nginx -p "$W/nginx" -c "$W/nginx/nginx.conf" 2>nginx/stderr &
PIDS+=($!)
npid=$!
up "http://127.0.0.1:$nport/index.json" nginx nginx/stderr

# cpu PID: clock ticks used so far by PID and its children that are
# alive (nginx's worker; strata serve is one process).
cpu() {
	local t=0 p
	for p in "$1" $(pgrep -P "$1" || true); do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
tag() { curl -fsS -D - -o /dev/null "$1" | awk 'tolower($1) == "etag:" {sub(/\r$/, ""); print $2}'; }
stag=$(tag "http://127.0.0.1:$sport/index.json")
ntag=$(tag "http://127.0.0.1:$nport/index.json")
for pair in "$sport $stag" "$nport $ntag"; do
	set -- $pair
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $2" "http://127.0.0.1:$1/index.json")
	[ "$code" = 304 ] || { echo "bench-serve: port $1 answered $code, not 304, to If-None-Match $2" >&2; exit 1; }
done

# poll PID PORT TAG [HEADER...]: microseconds of the server's CPU per
# completed poll in one wrk run.
hz=$(getconf CLK_TCK)
poll() {
	local pid=$1 port=$2 tag=$3 before after n
	shift 3
	before=$(cpu "$pid")
	n=$(wrk -t1 -c"$CONNS" -d"$DURATION" -H "If-None-Match: $tag" "$@" "http://127.0.0.1:$port/index.json" |
		awk '/requests in/ {print $1}')
	after=$(cpu "$pid")
	[ -n "$n" ] && [ "$n" -gt 0 ] || { echo "bench-serve: wrk completed no polls on port $port" >&2; exit 1; }
	python3 -c "print('%.2f' % (($after - $before) / $hz * 1e6 / $n))"
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

ka_s="" ka_n="" nc_s="" nc_n=""
for _ in $(seq "$RUNS"); do
	ka_s="$ka_s $(poll "$spid" "$sport" "$stag")"
	ka_n="$ka_n $(poll "$npid" "$nport" "$ntag")"
	nc_s="$nc_s $(poll "$spid" "$sport" "$stag" -H 'Connection: close')"
	nc_n="$nc_n $(poll "$npid" "$nport" "$ntag" -H 'Connection: close')"
done
row() {
	local a b
	a=$(median "$2") b=$(median "$3")
	printf '  %-34s strata %7.1f µs   nginx %7.1f µs   %6sx\n' "$1" "$a" "$b" "$(python3 -c "print('%.2f' % ($a / $b))")"
}
echo "server CPU per unchanged poll (304), wrk -t1 -c$CONNS -d$DURATION, medians of $RUNS runs:"
row "keep-alive" "$ka_s" "$ka_n"
row "new connection per poll" "$nc_s" "$nc_n"
