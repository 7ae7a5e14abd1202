#!/usr/bin/env bash
# Chaos under load (issue 13): `trafik load` at RATE req/s for 10 s through quick mode in front
# of three replicas while one of them is killed and restarted, never answers, or fails half its
# requests; then every backend down, for the retry budget; then (issue 23) a binary upgrade,
# SIGUSR2 halfway through, with the load's connections kept alive (goal: 0 failed). Prints each
# run's failures, latency and what /status says.
# Then (issue 26) the failover budget: kill -9 one replica under load, with outlier ejection on
# and off, retries 0 and 1; the budget /status prints against the time from the kill to the last
# failed request and to trafik's "marked down" event (its JSON access log, same clock).
# Usage: bench/chaos.sh [RATE] [all|upgrade|failover]   (TRAFIK=path/to/trafik to skip the
# release build). Stand-ins for the silent and half-failing replica are Python (python3).
set -euo pipefail
rate=${1:-2000}
scenarios=${2:-all}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRAFIK=$trafik
ports=(39201 39202 39203)
proxy_port=39200
admin=127.0.0.1:39209

cat > "$work/standin.py" <<'PY'
import socket, sys, threading
port, mode = int(sys.argv[1]), sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(1024)
count, lock = [0], threading.Lock()
def serve(c):
    buf = b""
    while True:
        try: d = c.recv(65536)
        except OSError: return
        if not d: return
        if mode == "silent": continue
        buf += d
        while b"\r\n\r\n" in buf:
            buf = buf[buf.index(b"\r\n\r\n") + 4:]
            with lock: count[0] += 1; n = count[0]
            c.sendall(b"HTTP/1.1 %d X\r\ncontent-length: 2\r\n\r\nok" % (500 if n % 2 else 200))
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
PY

replica() { "$TRAFIK" upstream --listen "127.0.0.1:$1" --name "k$1" >/dev/null 2>&1 & pids+=($!); echo $!; }
proxy() {
  local args=()
  for port in "${ports[@]}"; do args+=(--to "127.0.0.1:$port"); done
  # shellcheck disable=SC2086
  "$TRAFIK" ${global:-} proxy --listen "127.0.0.1:$proxy_port" --admin "$admin" "${args[@]}" "$@" >"$work/proxy.log" 2>&1 &
  pids+=($!); proxy_pid=$!
  sleep 1
}
load() { "$TRAFIK" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate "$rate" --duration 10s --json >"$work/load.json" 2>/dev/null || true; }
report() {
  python3 - "$1" "$work/load.json" "$(curl -s "http://$admin/status")" <<'PY'
import json, sys
name, load, status = sys.argv[1], json.load(open(sys.argv[2])), json.loads(sys.argv[3])
pool = status["pools"][0]
failed = sum(load["errors"].values())
print(f"{name}: {load['sent']} sent at {load['achieved_rate']:.0f}/s, {failed} failed "
      f"{ {k: v for k, v in load['errors'].items() if v} }, p50 {load['latency_ms']['p50']} ms, "
      f"p99 {load['latency_ms']['p99']} ms, max {load['latency_ms']['max']} ms; retries {pool['retries']}, "
      f"refused by the budget {pool['retries_refused']}")
for b in pool["backends"]:
    print(f"    {b['address']}: requests {b['requests']}, healthy {b['healthy']}, "
          f"ejections {b.get('ejections')}, reason {b.get('ejection_reason')}")
PY
}
stop_all() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

# The old process hands its sockets to a successor it starts (the same binary and arguments)
# and drains; `trafik load` keeps its connections alive throughout, so every connection open at
# the signal has to be closed by the old process without losing a request on it.
upgrade() {
  local ports=("${ports[0]}")
  replica "${ports[0]}" >/dev/null
  proxy
  load & loader=$!
  sleep 5; kill -USR2 "$proxy_pid"
  wait "$loader"
  # The successor was started by the old process, not here: its pid is in the log.
  local successor old_exit=0
  successor=$(sed -n 's/^upgrade: process \([0-9]*\) serves now.*/\1/p' "$work/proxy.log")
  [[ -n $successor ]] && pids+=("$successor")
  wait "$proxy_pid" || old_exit=$?
  python3 - "$work/load.json" "${successor:-none}" "$old_exit" <<'PY'
import json, sys
load, successor, old_exit = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
failed = sum(load["errors"].values())
print(f"SIGUSR2 at 5 s, kept-alive connections: {load['sent']} sent at {load['achieved_rate']:.0f}/s, "
      f"{failed} failed {dict((k, v) for k, v in load['errors'].items() if v)} (goal 0), "
      f"p99 {load['latency_ms']['p99']} ms, max {load['latency_ms']['max']} ms; "
      f"successor {successor}, old process exited {old_exit}")
PY
  stop_all
}

if [[ $scenarios == upgrade ]]; then
  upgrade
  exit 0
fi

# Health checks every 1 s (quick mode: timeout 1 s, fall 1: a budget of 2 s). The kill instant is read just
# before the signal; trafik's log timestamps are from the same clock.
failover() {
  local outlier retries killed_at
  for outlier in off on; do
    for retries in 0 1; do
      for port in "${ports[@]}"; do
        replica "$port" >/dev/null
        [[ $port == "${ports[1]}" ]] && victim=${pids[-1]}
      done
      global="--log-format json" proxy --access-log --health-path /saglik --health-interval 1s \
        --outlier "$outlier" --retries "$retries"
      load & loader=$!
      sleep 3; killed_at=$(date +%s.%N); kill -9 "$victim"
      wait "$loader"
      python3 - "$outlier" "$retries" "$killed_at" "127.0.0.1:${ports[1]}" "$work/load.json" "$work/proxy.log" \
        "$(curl -s "http://$admin/status")" <<'PY'
import datetime, json, sys
outlier, retries, killed_at, victim, load, log, status = sys.argv[1:]
killed_at, load = float(killed_at), json.load(open(load))
def at(line):
    stamp = line["timestamp"].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()
lines = [json.loads(l) for l in open(log) if l.startswith("{")]
failed = [at(l) for l in lines if l.get("target") == "trafik::access" and l["fields"].get("status", 0) >= 500]
down = [at(l) for l in lines if l["fields"].get("message") == "backend marked down" and l["fields"].get("backend") == victim]
budget = json.loads(status)["pools"][0]["failover"]
last = f"{max(failed) - killed_at:.2f} s" if failed else "none"
marked = f"{down[0] - killed_at:.2f} s" if down else "not within the load"
print(f"kill -9, outlier {outlier}, retries {retries}: {sum(load['errors'].values())} of {load['sent']} failed; "
      f"last failure {last} after the kill, marked down at {marked}; budget {budget['seconds']} s: {budget['text']}")
PY
      stop_all
    done
  done
}

if [[ $scenarios == failover ]]; then
  failover
  exit 0
fi

for checks in "" "--health-path /saglik --health-interval 500ms"; do
  # The victim's pid as started (a pgrep right after the start can run before its exec).
  for port in "${ports[@]}"; do
    replica "$port" >/dev/null
    [[ $port == "${ports[1]}" ]] && victim=${pids[-1]}
  done
  # shellcheck disable=SC2086
  proxy $checks
  load & loader=$!
  sleep 3; kill -9 "$victim"
  sleep 1.5
  curl -s "http://$admin/status" | python3 -c "import json,sys; b=json.load(sys.stdin)['pools'][0]['backends'][1]; print('    at 4.5 s the killed replica: healthy', b['healthy'], 'ejected', b.get('ejected'), b.get('ejection_reason'))"
  sleep 1.5; replica "${ports[1]}" >/dev/null
  wait "$loader"
  report "kill -9 at 3 s, restart at 6 s ${checks:+(active checks)}"
  stop_all
done

for mode in silent half; do
  replica "${ports[0]}" >/dev/null; replica "${ports[1]}" >/dev/null
  python3 "$work/standin.py" "${ports[2]}" "$mode" & pids+=($!)
  proxy --response-timeout 200ms
  load
  report "one replica $mode (per-try timeout 200 ms)"
  stop_all
done

ports=(39211 39212 39213)
proxy --retries 2
load
report "every backend refusing, --retries 2"
stop_all

ports=(39201 39202 39203)
failover
upgrade
