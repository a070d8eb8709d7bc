#!/usr/bin/env bash
# servercost.sh: the instructions redis-server executes per lock pair
# (valgrind's Ir count, which the machine's load does not move), for each
# sub-benchmark of the root package's BenchmarkServerCost: the default
# scripts, the contract's nine calls with no logic, two empty scripts, raw
# SET NX PX + compare-and-delete, fair mode's scripts and a campaign with a
# priority. Each is run twice, with 1000 and 3000
# pairs, on a fresh server under valgrind; the difference over 2000 pairs
# leaves out the server's start, the script loads and the benchmark's
# warm-up.
#
#   bench/servercost.sh [server program]    (default: redis-server)
#
# Needs valgrind (apt-get install -y valgrind). Takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
server=${1:-redis-server}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/rl.test" .

ir() { # ir SUB N: the Ir of a server that ran N pairs of SUB
  local port pid
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$work/cg" \
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  SERVER_COST_ADDR=127.0.0.1:$port "$work/rl.test" -test.run '^$' -test.bench "ServerCost/$1\$" -test.benchtime "$2x" >"$work/bench" ||
    { cat "$work/bench" >&2; kill "$pid"; return 1; }
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^summary:/ { print $2 }' "$work/cg"
}

"$server" --version
for sub in scripts nine-calls empty raw-cad fair priority; do
  a=$(ir "$sub" 1000)
  b=$(ir "$sub" 3000)
  printf '%-11s %7d instructions per pair\n' "$sub" $(((b - a) / 2000))
done
