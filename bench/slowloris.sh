#!/usr/bin/env bash
# Slowloris (issue 13): CONNECTIONS connections trickle header lines (one a second each, the
# head never ends) while `trafik load` measures normal clients at RATE req/s for 10 s through
# trafik to one replica. Prints the normal clients' p50/p99 quiet and under attack (medians of
# ROUNDS interleaved rounds), their ratio (the goal: p99 within 2×), trafik's peak RSS, then a
# run with trafik under `ulimit -n 256` (most attack connections cannot even be accepted):
# trafik's CPU share over the attack, which must not be a spinning core.
# Usage: bench/slowloris.sh [CONNECTIONS] [RATE] [ROUNDS]   (TRAFIK=path/to/trafik to skip
# the release build). The attacker is Python (python3).
set -euo pipefail
connections=${1:-2000}
rate=${2:-500}
rounds=${3:-3}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
backend_port=$(free_port)
proxy_port=$(free_port)
admin=127.0.0.1:$(free_port)

cat >"$work/trickle.py" <<'PY'
import selectors, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = []
for n in range(count):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    socks.append(s)
    if n % 200 == 199:
        time.sleep(0.05)
for s in socks:
    try:
        s.send(b"GET /slow HTTP/1.1\r\nHost: a\r\n")
    except OSError:
        pass
end = time.time() + seconds
line = 0
while time.time() < end:
    time.sleep(1)
    line += 1
    alive = 0
    for s in socks:
        try:
            s.send(b"X-%d: a\r\n" % line)
            alive += 1
        except OSError:
            pass
    print(f"{line} s: {alive} connections still trickling", file=sys.stderr, flush=True)
PY

"$trafik" upstream --listen "127.0.0.1:$backend_port" --name k1 >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$backend_port"
cat >"$work/proxy.toml" <<TOML
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
TOML

start_proxy() { # [ulimit -n]
  if [[ -n ${1:-} ]]; then
    (ulimit -n "$1" && exec "$trafik" serve -c "$work/proxy.toml") >"$work/proxy.log" 2>&1 &
  else
    "$trafik" serve -c "$work/proxy.toml" >"$work/proxy.log" 2>&1 &
  fi
  proxy_pid=$!
  pids+=($proxy_pid)
  wait_for_port "$proxy_port"
}
stop_proxy() { kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true; }
measure_load() { # → "p50 p99 failed"
  "$trafik" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate "$rate" --duration 10s \
    --timeout 5s --json >"$work/load.json" 2>/dev/null || true
  python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))
print(l["latency_ms"]["p50"], l["latency_ms"]["p99"], sum(l["errors"].values()))' "$work/load.json"
}
peak_rss_mib() { awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$proxy_pid/status"; }

declare -A P50 P99 FAILED RSS
for round in $(seq "$rounds"); do
  for mode in quiet attack; do
    start_proxy
    "$trafik" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate 200 --duration 1s >/dev/null 2>&1 || true
    if [[ $mode == attack ]]; then
      python3 "$work/trickle.py" "$proxy_port" "$connections" 14 2>"$work/trickle.log" &
      attacker=$!
      sleep 3
    fi
    read -r p50 p99 failed < <(measure_load)
    P50[$mode]="${P50[$mode]:-} $p50"; P99[$mode]="${P99[$mode]:-} $p99"
    FAILED[$mode]="${FAILED[$mode]:-} $failed"; RSS[$mode]="${RSS[$mode]:-} $(peak_rss_mib)"
    echo "round $round $mode: p50 $p50 ms, p99 $p99 ms, failed $failed, peak RSS $(peak_rss_mib) MiB" >&2
    if [[ $mode == attack ]]; then
      tail -1 "$work/trickle.log" >&2
      wait "$attacker" 2>/dev/null || true
    fi
    stop_proxy
  done
done

printf '\nnormal clients at %s req/s for 10 s, %s trickling connections, medians of %s rounds\n' "$rate" "$connections" "$rounds"
printf '%-8s %9s %9s %8s %14s\n' run "p50 ms" "p99 ms" failed "peak RSS MiB"
for mode in quiet attack; do
  printf '%-8s %9s %9s %8s %14s\n' "$mode" "$(median "${P50[$mode]}")" "$(median "${P99[$mode]}")" \
    "$(median "${FAILED[$mode]}")" "$(median "${RSS[$mode]}")"
done
printf 'p99 under attack / quiet: %s (goal: at most 2)\n' "$(ratio "$(median "${P99[attack]}")" "$(median "${P99[quiet]}")")"

# Out of descriptors: trafik with 256, the attack holding every one it can.
start_proxy 256
python3 "$work/trickle.py" "$proxy_port" "$connections" 20 2>"$work/trickle.log" &
attacker=$!
sleep 2
before=$(ticks "$proxy_pid")
sleep 5
idle_cpu=$(awk -v t=$(($(ticks "$proxy_pid") - before)) -v hz="$hz" 'BEGIN { printf "%.0f", 100 * t / hz / 5 }')
before=$(ticks "$proxy_pid")
read -r p50 p99 failed < <(measure_load)
load_cpu=$(awk -v t=$(($(ticks "$proxy_pid") - before)) -v hz="$hz" 'BEGIN { printf "%.0f", 100 * t / hz / 10 }')
wait "$attacker" 2>/dev/null || true
printf '\nulimit -n 256, %s trickling connections: trafik CPU %s %% of one core with only the attack (5 s), %s %% with the load too (10 s); normal clients p50 %s ms, p99 %s ms, %s failed; peak RSS %s MiB\n' \
  "$connections" "$idle_cpu" "$load_cpu" "$p50" "$p99" "$failed" "$(peak_rss_mib)"
stop_proxy
