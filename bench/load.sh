#!/usr/bin/env bash
# trafik load vs wrk (and oha when built) against the same fast upstream, in one run on loopback.
#
#   closed loop on one core's worth of client (issue 28's goal: trafik load ≥ 1.2 × wrk's
#   req/s): the upstream runs on every core but the last, each client pinned to the last one
#   (taskset: wrk -t1, and trafik load's runtime sees one CPU, so one worker), 64 connections,
#   5 s, ROUNDS interleaved rounds; medians of req/s and of the client's CPU µs per request
#   (user+sys of the load generator process), with each round's figures and the ratio;
#   open loop at 50,000 req/s for 5 s: achieved rate and late sends, for trafik load (and oha)
#   (wrk has no open loop; wrk2 is not packaged);
#   open loop at the course's 514 req/s for 5 s: how closely trafik load holds it.
#
#   bench/load.sh
#   DURATION=10 CONNECTIONS=128 ROUNDS=5 bench/load.sh
#   OHA=build bench/load.sh      # also oha, built once with `cargo install oha` (about 6 minutes)
#
# Needs wrk (apt-get install wrk), taskset (util-linux), two cores or more, and cargo; oha is
# used when it was built into ${XDG_CACHE_HOME:-~/.cache}/trafik/bench-tools.
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
OPEN_RATE=${OPEN_RATE:-50000}
COURSE_RATE=${COURSE_RATE:-514}

command -v wrk >/dev/null || { echo "bench/load.sh needs wrk (apt-get install wrk)" >&2; exit 2; }
cores=$(nproc)
(( cores >= 2 )) || { echo "bench/load.sh needs two cores: one for the client, the rest for the upstream" >&2; exit 2; }
client_cpu=$((cores - 1))
server_cpus="0-$((cores - 2))"
tools="${XDG_CACHE_HOME:-$HOME/.cache}/trafik/bench-tools"
if [[ ${OHA:-} == build && ! -x $tools/bin/oha ]]; then
  echo "building oha once into $tools (cargo install oha)…" >&2
  cargo install oha --locked --root "$tools" -q
fi
oha=""
[[ -x $tools/bin/oha ]] && oha="$tools/bin/oha"

source "$(dirname "$0")/lib.sh"

PORT=$(free_port)
RUST_LOG=warn taskset -c "$server_cpus" "$trafik" upstream --name k1 --listen "127.0.0.1:$PORT" >/dev/null &
pids+=($!)
wait_for_port "$PORT"
url="http://127.0.0.1:$PORT/takip/TR-4821"

# Runs a command and prints "CPU-seconds" (user+sys of it and its threads) to $work/cpu.
timed() {
  local TIMEFORMAT='%U %S'
  { time "$@" >"$work/out" 2>"$work/err"; } 2>"$work/time" || true
  awk '{print $1 + $2}' "$work/time" | tail -1 >"$work/cpu"
}
per_request_us() { awk -v c="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.2f", c * 1e6 / n; else print "-" }'; }
pinned() { taskset -c "$client_cpu" "$@"; }

tools_run="trafik wrk"; [[ -n $oha ]] && tools_run+=" oha"
echo "trafik load bench: $cores cores; upstream: trafik upstream on CPU $server_cpus; each client on CPU $client_cpu; $CONNECTIONS connections, ${DURATION}s per run, $ROUNDS interleaved closed-loop rounds (medians)"
echo
declare -A RPS CPU
closed_round() {
  timed pinned "$trafik" load "$url" --max --connections "$CONNECTIONS" --duration "${DURATION}s" --json
  local rps n
  rps=$(sed -n 's/^  "achieved_rate": \([0-9.]*\),*/\1/p' "$work/out"); n=$(sed -n 's/^  "completed": \([0-9]*\),*/\1/p' "$work/out")
  RPS[trafik]+=" $rps"; CPU[trafik]+=" $(per_request_us "$(cat "$work/cpu")" "$n")"

  timed pinned wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "$url"
  rps=$(awk '/^Requests\/sec/ {print $2}' "$work/out"); n=$(awk '/requests in/ {print $1}' "$work/out")
  RPS[wrk]+=" $rps"; CPU[wrk]+=" $(per_request_us "$(cat "$work/cpu")" "$n")"

  if [[ -n $oha ]]; then
    timed pinned "$oha" --no-tui -z "${DURATION}s" -c "$CONNECTIONS" --output-format json "$url"
    rps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["summary"]["requestsPerSec"])' "$work/out" 2>/dev/null || echo 0)
    n=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(d["statusCodeDistribution"].values()))' "$work/out" 2>/dev/null || echo 0)
    RPS[oha]+=" $rps"; CPU[oha]+=" $(per_request_us "$(cat "$work/cpu")" "$n")"
  fi
}
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { print (NR ? a[int((NR + 1) / 2)] : 0) }'; }
for _ in $(seq "$ROUNDS"); do closed_round; done
printf '%-26s %12s %14s   %s\n' "closed loop, one core" "req/s" "client µs/req" "(each round's req/s)"
for tool in $tools_run; do
  label=$tool; [[ $tool == trafik ]] && label="trafik load --max"; [[ $tool == wrk ]] && label="wrk -t1"
  printf '%-26s %12.0f %14s   %s\n' "$label" "$(median "${RPS[$tool]}")" "$(median "${CPU[$tool]}")" "${RPS[$tool]}"
done
awk -v t="$(median "${RPS[trafik]}")" -v w="$(median "${RPS[wrk]}")" 'BEGIN { printf "trafik/wrk closed-loop req/s on one core: %.2f× (goal ≥ 1.20×)\n", t / w }'
# The same ratio round by round: each pair ran back to back against the same upstream.
paste -d' ' <(tr ' ' '\n' <<<"${RPS[trafik]}" | grep -v '^$') <(tr ' ' '\n' <<<"${RPS[wrk]}" | grep -v '^$') |
  awk '{ printf "%s%.2f×", (NR > 1 ? " " : "round by round: "), $1 / $2 } END { print "" }'

echo
printf '%-30s %14s %12s %10s\n' "open loop" "achieved req/s" "% of target" "late"
for rate in "$OPEN_RATE" "$COURSE_RATE"; do
  timed "$trafik" load "$url" --rate "$rate" --duration "${DURATION}s" --connections "$CONNECTIONS" --json
  python3 - "$work/out" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); rate = float(sys.argv[2])
print(f"{'trafik load --rate ' + sys.argv[2]:<30} {d['achieved_rate']:14.1f} {100 * d['achieved_rate'] / rate:11.2f}% {d['late']:10d}  (dropped {d['dropped']}, p99 {d['latency_ms']['p99']:.2f} ms)")
PY
done
if [[ -n $oha ]]; then
  timed "$oha" --no-tui -z "${DURATION}s" -c "$CONNECTIONS" -q "$OPEN_RATE" --latency-correction --output-format json "$url"
  python3 - "$work/out" "$OPEN_RATE" "$DURATION" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); rate = float(sys.argv[2])
achieved = sum(d["statusCodeDistribution"].values()) / float(sys.argv[3])
print(f"{'oha -q ' + sys.argv[2]:<30} {achieved:14.1f} {100 * achieved / rate:11.2f}% {'-':>10}  (oha does not count late sends)")
PY
fi
echo "goals: open loop ≥ 99% of $OPEN_RATE req/s; $COURSE_RATE req/s held within 0.5%"
