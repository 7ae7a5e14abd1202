#!/usr/bin/env bash
# The mirror's cost to the client (issue 24: "the client's p99 stays within 10 % of a run without
# it and a dead mirror changes nothing for the client"). One `trafik upstream` replica k1 behind
# four listeners of one trafik: the route to its pool alone, the same route with
# `mirror = { pool = "golge", percent = 5 }` and with `percent = 100` to a live shadow replica
# g1, and with `percent = 100` to a dead mirror (a port nobody listens on). `trafik load` sends
# each the same fixed open-loop rate (latency from the intended send time, so a stall counts),
# in interleaved rounds; prints each variant's p50 and p99 (medians over the rounds), its p99
# relative to the run without a mirror, its failed requests, and the copies /status counted
# (sent, dropped, failed: the mirror's share). Every process it starts is stopped by its PID on
# exit.
#
#   bench/mirror.sh                            # 3 rounds × 5 s at 1000 req/s
#   RATE=2000 DURATION=10 ROUNDS=5 bench/mirror.sh
#
# Needs: cargo, curl, jq, python3.
set -euo pipefail

RATE=${RATE:-1000}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}

for tool in curl jq python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench/mirror.sh needs $tool" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"

UPSTREAM_PORT=$(free_port)
SHADOW_PORT=$(free_port)
DEAD_PORT=$(free_port) # chosen free and left so: the dead mirror's copies are refused
ADMIN_PORT=$(free_port)
declare -A PORT
VARIANTS=(plain mirror5 mirror100 dead100)
for variant in "${VARIANTS[@]}"; do PORT[$variant]=$(free_port); done

RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
RUST_LOG=warn "$trafik" upstream --name g1 --listen "127.0.0.1:$SHADOW_PORT" >/dev/null &
pids+=($!)

# One listener per variant: the route to pool k, and its mirror when it has one.
listener() { # variant mirror-line
  printf '\n[[listener]]\nname = "%s"\nlisten = "127.0.0.1:%s"\n[[listener.route]]\npool = "k"\n%s\n' \
    "$1" "${PORT[$1]}" "$2"
}
{
  printf '[server]\nworkers = %s\n\n[admin]\nlisten = "127.0.0.1:%s"\n' "$WORKERS" "$ADMIN_PORT"
  listener plain ""
  listener mirror5 'mirror = { pool = "golge", percent = 5 }'
  listener mirror100 'mirror = { pool = "golge", percent = 100 }'
  listener dead100 'mirror = { pool = "dead", percent = 100 }'
  printf '\n[[pool]]\nname = "k"\nbackends = [{ address = "127.0.0.1:%s" }]\n' "$UPSTREAM_PORT"
  printf '\n[[pool]]\nname = "golge"\nbackends = [{ address = "127.0.0.1:%s" }]\n' "$SHADOW_PORT"
  printf '\n[[pool]]\nname = "dead"\nbackends = [{ address = "127.0.0.1:%s" }]\n' "$DEAD_PORT"
} >"$work/trafik.toml"
RUST_LOG=warn "$trafik" serve -c "$work/trafik.toml" >/dev/null 2>"$work/serve.log" &
pids+=($!)

for port in "$UPSTREAM_PORT" "$SHADOW_PORT" "$ADMIN_PORT" "${PORT[@]}"; do wait_for_port "$port"; done
for variant in "${VARIANTS[@]}"; do
  status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORT[$variant]}$PATH_UNDER_TEST")
  [[ $status == 200 ]] || { echo "$variant answered $status" >&2; exit 1; }
done

declare -A P50 P99 FAILED SENT
# One run of `trafik load` at RATE for DURATION against VARIANT after a 1 s warm-up at the same
# rate; its exit status (98 when the rate could not be held on a busy machine) is reported in the
# figures, not fatal.
measure() { # variant
  local url="http://127.0.0.1:${PORT[$1]}$PATH_UNDER_TEST" out
  "$trafik" load --rate "$RATE" --duration 1s --json "$url" >/dev/null || true
  out=$("$trafik" load --rate "$RATE" --duration "${DURATION}s" --json "$url" || true)
  P50[$1]="${P50[$1]:-} $(jq .latency_ms.p50 <<<"$out")"
  P99[$1]="${P99[$1]:-} $(jq .latency_ms.p99 <<<"$out")"
  FAILED[$1]=$(( ${FAILED[$1]:-0} + $(jq '[.errors[]] | add' <<<"$out") ))
  SENT[$1]=$(( ${SENT[$1]:-0} + $(jq .sent <<<"$out") ))
}

echo "mirror: trafik load --rate $RATE --duration ${DURATION}s, $ROUNDS round(s), $WORKERS workers, $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for variant in "${VARIANTS[@]}"; do measure "$variant"; done
done

status=$(curl -s "http://127.0.0.1:$ADMIN_PORT/status")
copies() { # variant field
  jq -r --arg route "$1 /" --arg field "$2" \
    '[.routing[] | select(.route == $route) | .mirror[$field]] | first // "-"' <<<"$status"
}
base=$(median "${P99[plain]}")
printf '\n%-10s %9s %9s %11s %8s %8s %9s %8s %8s\n' variant "p50 ms" "p99 ms" "p99/plain" requests failed "copies" dropped "c.failed"
for variant in "${VARIANTS[@]}"; do
  printf '%-10s %9s %9s %11s %8s %8s %9s %8s %8s\n' "$variant" \
    "$(median "${P50[$variant]}")" "$(median "${P99[$variant]}")" \
    "$(ratio "$(median "${P99[$variant]}")" "$base")" "${SENT[$variant]}" "${FAILED[$variant]}" \
    "$(copies "$variant" sent)" "$(copies "$variant" dropped)" "$(copies "$variant" failed)"
done
echo "(copies counted over every request sent, warm-ups and the check included; goal: p99/plain ≤ 1.10, failed 0)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
