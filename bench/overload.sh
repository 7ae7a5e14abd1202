#!/usr/bin/env bash
# Overload (issue 13): one backend of bounded capacity (`trafik upstream --work-ms 2`, one
# thread burning 2 ms of CPU per request: about 500 req/s) offered RATE req/s through trafik
# for 10 s, with a fixed limit (max_requests_per_backend = FIXED) and with the adaptive
# concurrency limit ([pool.adaptive_concurrency], defaults). Prints for each the goodput
# (2xx/s), p50 and p99 of the answers' latency (from the intended send) and the share of 503s,
# medians of ROUNDS interleaved rounds. Usage: bench/overload.sh [RATE] [FIXED] [ROUNDS]
# (TRAFIK=path/to/trafik to skip the release build).
set -euo pipefail
rate=${1:-800}
fixed=${2:-64}
rounds=${3:-3}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
backend_port=$(free_port)
proxy_port=$(free_port)
admin=127.0.0.1:$(free_port)

"$trafik" upstream --listen "127.0.0.1:$backend_port" --name k1 --work-ms 2 >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$backend_port"

config() { # name extra-pool-lines
  cat >"$work/$1.toml" <<TOML
[admin]
listen = "$admin"

[[listener]]
name = "web"
listen = "127.0.0.1:$proxy_port"

[[listener.route]]
pool = "tek"

[[pool]]
name = "tek"
backends = [{ address = "127.0.0.1:$backend_port" }]
retries = 0
$2

[pool.outlier]
enabled = false

[pool.timeouts]
response = "5s"
TOML
}
config fixed "max_requests_per_backend = $fixed"
config adaptive "adaptive_concurrency = {}"

declare -A GOOD P50 P99 SHED LIMIT
run() { # name
  "$trafik" serve -c "$work/$1.toml" >"$work/$1.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  wait_for_port "$proxy_port"
  # A short warm-up at half the capacity: connections open, the baseline is learnt.
  "$trafik" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate 200 --duration 2s >/dev/null 2>&1 || true
  "$trafik" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate "$rate" --duration 10s \
    --timeout 5s --json >"$work/load.json" 2>/dev/null || true
  local status
  status=$(curl -s "http://$admin/status")
  read -r good p50 p99 shed limit < <(python3 - "$work/load.json" "$status" <<'PY'
import json, sys
load, status = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
pool = status["pools"][0]
limit = pool.get("adaptive_concurrency", {}).get("limit", "-")
sent = max(load["sent"], 1)
print(f"{load['completed'] / load['duration_s']:.0f} {load['latency_ms']['p50']:.1f} "
      f"{load['latency_ms']['p99']:.1f} {100 * load['errors']['status_5xx'] / sent:.1f} {limit}")
PY
)
  GOOD[$1]="${GOOD[$1]:-} $good"; P50[$1]="${P50[$1]:-} $p50"; P99[$1]="${P99[$1]:-} $p99"
  SHED[$1]="${SHED[$1]:-} $shed"; LIMIT[$1]="${LIMIT[$1]:-} $limit"
  echo "round: $1 goodput $good/s p50 $p50 ms p99 $p99 ms 503 $shed % limit at the end $limit" >&2
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for _ in $(seq "$rounds"); do
  run fixed
  run adaptive
done

printf '\n%s req/s offered to ~500 req/s of capacity, 10 s, medians of %s rounds\n' "$rate" "$rounds"
printf '%-22s %10s %9s %9s %8s %12s\n' limit "goodput/s" "p50 ms" "p99 ms" "503 %" "final limit"
for name in fixed adaptive; do
  label=$name
  [[ $name == fixed ]] && label="fixed ($fixed/backend)"
  printf '%-22s %10s %9s %9s %8s %12s\n' "$label" "$(median "${GOOD[$name]}")" "$(median "${P50[$name]}")" \
    "$(median "${P99[$name]}")" "$(median "${SHED[$name]}")" "$(median "${LIMIT[$name]}")"
done
