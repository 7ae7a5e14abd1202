#!/usr/bin/env bash
# Memory after floods (issue 23, finding 4): is what a flood took given back once its
# connections close? Floods one trafik (in front of one replica) ROUNDS times with, in turn:
#   idle      IDLE TCP connections that send nothing;
#   slowloris SLOW connections trickling one header line a second, the head never ending;
#   h2        H2 HTTP/2 connections (prior knowledge) with STREAMS requests each, stalled: the
#             client's stream window is 0, so no answer body can be sent.
# Each flood holds HOLD seconds, then the client closes. trafik's RSS (VmRSS) is read before
# each flood, every quarter second during it (the peak is shown) and SETTLE seconds after the
# client closed. Goal: every "after" within 1.5 × the fresh proxy's RSS after a short warm-up;
# the script exits 1 when one is not. Last, RSS once the idle timeout (60 s) has closed the
# upstream connections the floods left in the keep-alive pools (past 32 a worker, they go after
# 2 s idle).
# Usage: bench/memory.sh [IDLE] [SLOW] [H2] [STREAMS] [ROUNDS]   (defaults 5000 2000 250 200 3;
# TRAFIK=path/to/trafik to skip the release build, HOLD=8 SETTLE=5). The clients are Python.
set -euo pipefail
idle=${1:-5000}
slow=${2:-2000}
h2=${3:-250}
streams=${4:-200}
rounds=${5:-3}
hold=${HOLD:-8}
settle=${SETTLE:-5}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The idle flood's client holds a descriptor per connection, and so does trafik (which raises
# its own soft limit to the hard one).
ulimit -n "$(ulimit -Hn)"
if (($(ulimit -n) < idle + 256)); then
  echo "ulimit -n $(ulimit -n) is too low for $idle idle connections" >&2
  exit 1
fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
backend_port=$(free_port)
proxy_port=$(free_port)

cat >"$work/flood.py" <<'PY'
"""flood.py MODE PORT CONNECTIONS SECONDS [STREAMS]: holds CONNECTIONS to 127.0.0.1:PORT for
SECONDS, then closes them all; prints what it held at the end on stderr."""
import selectors, socket, struct, sys, time

mode, port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
streams = int(sys.argv[5]) if len(sys.argv) > 5 else 0
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
time.sleep(0.2)

def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

def request(stream):
    # HPACK without Huffman: GET, http, :authority "a" and :path, END_STREAM | END_HEADERS.
    path = b"/takip/TR-%d" % stream
    block = b"\x82\x86\x41\x01a\x04" + bytes([len(path)]) + path
    return frame(1, 0x5, stream, block)

def send(s, data):
    try:
        s.sendall(data)
        return True
    except OSError:
        return False

if mode == "h2":
    # SETTINGS_INITIAL_WINDOW_SIZE 0: trafik may send each answer's head, never its body.
    hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, struct.pack(">HI", 4, 0))
    opened = b"".join(request(2 * n + 1) for n in range(streams))
    for s in socks:
        s.setblocking(True)
        s.settimeout(5)
        send(s, hello + opened)
        s.setblocking(False)
elif mode == "slowloris":
    for s in socks:
        send(s, b"GET /slow HTTP/1.1\r\nHost: a\r\n")

selector = selectors.DefaultSelector()
pending = {}
for s in socks:
    selector.register(s, selectors.EVENT_READ)
    pending[s] = b""
closed, heads = set(), 0
end, next_line, line = time.time() + seconds, time.time() + 1, 0
while time.time() < end:
    for key, _ in selector.select(timeout=0.2):
        s = key.fileobj
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            closed.add(s)
            selector.unregister(s)
            continue
        if mode != "h2":
            continue
        # Answer trafik's SETTINGS and PINGs; count the answer heads of stalled streams.
        buffer = pending[s] + data
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            kind, flags, payload = buffer[3], buffer[4], buffer[9 : 9 + length]
            buffer = buffer[9 + length :]
            if kind == 4 and not flags & 1:
                send(s, frame(4, 1, 0))
            elif kind == 6 and not flags & 1:
                send(s, frame(6, 1, 0, payload))
            elif kind == 1:
                heads += 1
        pending[s] = buffer
    if mode == "slowloris" and time.time() >= next_line:
        line += 1
        next_line += 1
        for s in socks:
            if s not in closed:
                send(s, b"X-%d: a\r\n" % line)
selector.close()
for s in socks:
    s.close()
held = f"{count - len(closed)} of {count} connections held to the end"
if mode == "h2":
    held += f", {heads} of {count * streams} streams answered a head (their bodies stalled)"
print(held, file=sys.stderr)
PY

"$trafik" upstream --listen "127.0.0.1:$backend_port" --name k1 >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$backend_port"
cat >"$work/proxy.toml" <<TOML
[[listener]]
name = "web"
listen = "127.0.0.1:$proxy_port"

[[listener.route]]
pool = "tek"

[[pool]]
name = "tek"
backends = [{ address = "127.0.0.1:$backend_port" }]
TOML
"$trafik" serve -c "$work/proxy.toml" >"$work/proxy.log" 2>&1 &
proxy_pid=$!
pids+=($proxy_pid)
wait_for_port "$proxy_port"

rss_mib() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$proxy_pid/status"; }
descriptors() { find "/proc/$proxy_pid/fd" -mindepth 1 | wc -l; }
bigger() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }

# Warm-up: the first requests set up what any proxy keeps (upstream connections, caches).
"$trafik" load "http://127.0.0.1:$proxy_port/takip/TR-{n}" --rate 200 --duration 1s >/dev/null 2>&1
sleep 2
baseline=$(rss_mib)
quiet_descriptors=$(descriptors)
limit=$(awk -v b="$baseline" 'BEGIN { printf "%.1f", 1.5 * b }')
printf 'trafik %s, RSS %s MiB after warm-up: goal after each flood at most %s MiB\n' \
  "$proxy_pid" "$baseline" "$limit" >&2

rows=()
failed=0
flood() { # name mode connections [streams]
  local name=$1 mode=$2 count=$3 before peak after
  before=$(rss_mib)
  peak=$before
  python3 "$work/flood.py" "$mode" "$proxy_port" "$count" "$hold" "${@:4}" 2>"$work/flood.log" &
  local client=$!
  while kill -0 "$client" 2>/dev/null; do
    peak=$(bigger "$peak" "$(rss_mib)")
    sleep 0.25
  done
  wait "$client" || { cat "$work/flood.log" >&2; exit 1; }
  # The connections are gone once trafik holds no more descriptors than when quiet (bounded).
  for _ in $(seq 40); do
    (($(descriptors) <= quiet_descriptors + 16)) && break
    sleep 0.25
  done
  sleep "$settle"
  after=$(rss_mib)
  echo "$name: $(cat "$work/flood.log"); RSS before $before, peak $peak, after $after MiB;" \
    "trafik holds $(descriptors) descriptors" >&2
  local verdict=ok
  if awk -v a="$after" -v l="$limit" 'BEGIN { exit !(a > l) }'; then
    verdict=OVER
    failed=1
  fi
  rows+=("$(printf '%-26s %10s %10s %10s %9s  %s' "$name" "$before" "$peak" "$after" \
    "$(ratio "$after" "$baseline")" "$verdict")")
}

for round in $(seq "$rounds"); do
  flood "$round idle $idle" idle "$idle"
  flood "$round slowloris $slow" slowloris "$slow"
  flood "$round h2 ${h2}x$streams" h2 "$h2" "$streams"
done

printf '\ntrafik RSS in MiB; after = %s s after the flood'"'"'s connections closed; warm baseline %s MiB\n' \
  "$settle" "$baseline"
printf '%-26s %10s %10s %10s %9s\n' flood before peak after after/base
printf '%s\n' "${rows[@]}"
printf 'goal: after at most 1.5 x baseline (%s MiB): %s\n' "$limit" "$( ((failed)) && echo FAILED || echo met)"
sleep 62
printf 'after the idle timeout closed the kept upstream connections: %s MiB (%s descriptors)\n' \
  "$(rss_mib)" "$(descriptors)"
exit "$failed"
