#!/usr/bin/env bash
# The gateway's cost: one aggregated request (two upstream calls in parallel, merged by jq)
# against routing the same two calls as two client requests, through the same trafik.
#
# Starts two `trafik upstream` replicas (the "durum" and "ucret" services) and one trafik with
# two routes: /takip/{no} aggregates both (`/takip/{no}` on each, merged by jq) and
# /yol/{no}/{part} routes to one of them by the capture (the service map). wrk drives the
# aggregate, then the routed pair (a Lua script alternating durum and ucret, so two requests
# make one pair). Prints req/s, p50, p99 and trafik's CPU microseconds per aggregated request vs
# per routed pair, medians of interleaved rounds, then the ratios. jq's own cost per request is
# the criterion bench: cargo bench -p trafik-gateway --bench jq.
#
#   bench/gateway.sh                    # 10 s per target, 2 wrk threads, 64 connections
#   DURATION=5 ROUNDS=3 bench/gateway.sh
#
# Needs: wrk and cargo.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
WORKERS=${WORKERS:-2}

for tool in wrk cargo; do
  command -v "$tool" >/dev/null || { echo "bench/gateway.sh needs $tool (apt-get install wrk)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 3)}
DURUM_PORT=$BASE_PORT
UCRET_PORT=$((BASE_PORT + 1))
TRAFIK_PORT=$((BASE_PORT + 2))

for port in "$DURUM_PORT" "$UCRET_PORT"; do
  RUST_LOG=warn "$trafik" upstream --name "k$port" --listen "127.0.0.1:$port" >/dev/null &
  pids+=($!)
  wait_for_port "$port"
done

cat >"$work/gateway.toml" <<CONF
[server]
workers = $WORKERS

[[pool]]
name = "durum"
backends = [{ address = "127.0.0.1:$DURUM_PORT" }]

[[pool]]
name = "ucret"
backends = [{ address = "127.0.0.1:$UCRET_PORT" }]

[[listener]]
name = "gecit"
listen = "127.0.0.1:$TRAFIK_PORT"

[[listener.route]]
path = "/yol/{no}/{part}"
service = "{part}"
services = ["durum", "ucret"]
upstream_path = "/takip/{no}"

[[listener.route]]
path = "/takip/{no}"
target = "aggregate"
merge = '.durum + {ucret: (.ucret | if . then {durum, bolge} else null end)}'

[[listener.route.part]]
name = "durum"
service = "durum"
path = "/takip/{no}"
missing = "fail"

[[listener.route.part]]
name = "ucret"
service = "ucret"
path = "/takip/{no}"
missing = "null"
CONF
RUST_LOG=warn "$trafik" serve -c "$work/gateway.toml" >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")
wait_for_port "$TRAFIK_PORT"

cat >"$work/pair.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  if n % 2 == 0 then return wrk.format("GET", "/yol/TR-4821/durum") end
  return wrk.format("GET", "/yol/TR-4821/ucret")
end
LUA

declare -A RPS P50 P99 CPU
run() { # name per-client-unit script-or-path
  local name=$1 unit=$2 target=$3 args before after out
  if [[ $target == *.lua ]]; then args=(-s "$target" "http://127.0.0.1:$TRAFIK_PORT/"); else args=("http://127.0.0.1:$TRAFIK_PORT$target"); fi
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s "${args[@]}" >/dev/null # warm-up
  before=$(ticks "$trafik_pid")
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "${args[@]}")
  after=$(ticks "$trafik_pid")
  local rps requests errors
  rps=$(awk -v u="$unit" '/^Requests\/sec/ {printf "%.0f", $2 / u}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $name: $errors" >&2
  RPS[$name]="${RPS[$name]:-} $rps"
  P50[$name]="${P50[$name]:-} $(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")"
  P99[$name]="${P99[$name]:-} $(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")"
  CPU[$name]="${CPU[$name]:-} $(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" -v u="$unit" 'BEGIN { printf "%.2f", t / hz * 1e6 / (n / u) }')"
}

echo "gateway bench: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS round(s), $WORKERS trafik workers, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  run aggregate 1 /takip/TR-4821
  run routed-pair 2 "$work/pair.lua"
done

printf '\n%-12s %12s %9s %9s %16s\n' what "answers/s" "p50 ms" "p99 ms" "CPU µs/answer"
for name in aggregate routed-pair; do
  printf '%-12s %12s %9s %9s %16s\n' "$name" "$(median "${RPS[$name]}")" "$(median "${P50[$name]}")" "$(median "${P99[$name]}")" "$(median "${CPU[$name]}")"
done
printf '\naggregate/routed-pair: answers/s %s×   CPU per answer %s×\n' \
  "$(ratio "$(median "${RPS[aggregate]}")" "$(median "${RPS[routed-pair]}")")" \
  "$(ratio "$(median "${CPU[aggregate]}")" "$(median "${CPU[routed-pair]}")")"
echo "(a routed pair is two client requests, one to each service; p50/p99 are per wrk request)"
