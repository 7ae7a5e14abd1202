#!/usr/bin/env bash
# trafik vs haproxy as layer-4 (TCP) proxies, in one run on loopback.
#
# Two measurements, each through trafik (`trafik proxy --mode tcp`), haproxy (`mode tcp`, as
# configured by default, and with `option splice-auto`, its zero-copy path) and directly:
#
#   transfer     one connection moves SIZE bytes (1 GiB) from a source to a sink: bytes/s, and
#                the proxy's CPU seconds per GiB (utime+stime from /proc, all threads); once
#                downloaded (server → client) and once uploaded (client → server, then the
#                client's half-close and the server's count back through the proxy);
#   connections  wrk with `Connection: close` against a `trafik upstream` replica: every request
#                is a new client connection and a new backend connection, so req/s is new
#                connections per second; and the proxy's CPU microseconds per connection, which
#                a busy machine disturbs less than the rate.
#
# Rounds are interleaved (each round runs every target once) and medians printed, then the
# ratios trafik/haproxy. The source and sink are a small Python program written to the work
# directory (socket sendall/recv_into with 1 MiB buffers), the same for every target. Every
# process it starts is stopped by its PID on exit.
#
#   bench/l4.sh                           # 1 GiB, 5 rounds, 5 s of wrk per target and round
#   SIZE=$((256 << 20)) ROUNDS=3 bench/l4.sh
#   TRAFIK=/tmp/trafik-before bench/l4.sh   # another build of trafik against the same peers
#
# Needs: haproxy wrk python3 (apt-get install haproxy wrk python3) and cargo.
set -euo pipefail

SIZE=${SIZE:-$((1 << 30))}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}
WORKERS=${WORKERS:-2}

for tool in haproxy wrk python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench/l4.sh needs $tool (apt-get install haproxy wrk python3)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 8)}

BLAST_PORT=$BASE_PORT
UPSTREAM_PORT=$((BASE_PORT + 1))
# Per target: the port for transfers, and the port for new connections (to the replica).
declare -A TRANSFER_PORT=([direct]=$BLAST_PORT [trafik]=$((BASE_PORT + 2)) [haproxy]=$((BASE_PORT + 4)) [haproxy-splice]=$((BASE_PORT + 6)))
declare -A CONNECT_PORT=([direct]=$UPSTREAM_PORT [trafik]=$((BASE_PORT + 3)) [haproxy]=$((BASE_PORT + 5)) [haproxy-splice]=$((BASE_PORT + 7)))
TARGETS=(direct trafik haproxy haproxy-splice)
# TRAFIK=path/to/trafik measures another build (an A/B of a change) instead of this tree's.
trafik=${TRAFIK:-$trafik}

# --- source and sink ------------------------------------------------------------------------
# Server: a request byte ('D' download, 'U' upload) and an 8-byte size; it sends that many
# bytes, or counts what it receives until the client's half-close and answers the count.
# Client: prints bytes per second from connect to the last byte.
cat >"$work/blast.py" <<'PY'
import socket, sys, time

CHUNK = memoryview(bytearray(1 << 20))

def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise EOFError("closed early")
        data += part
    return data

def serve(port):
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    while True:
        conn, _ = listener.accept()
        try:
            head = recv_exact(conn, 9)
            size = int.from_bytes(head[1:], "big")
            if head[:1] == b"D":
                left = size
                while left > 0:
                    left -= conn.send(CHUNK[: min(left, len(CHUNK))])
            else:
                got = 0
                while True:
                    n = conn.recv_into(CHUNK)
                    if n == 0:
                        break
                    got += n
                conn.sendall(got.to_bytes(8, "big"))
        except (OSError, EOFError):
            pass
        finally:
            conn.close()

def client(port, direction, size):
    start = time.perf_counter()
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall((b"D" if direction == "down" else b"U") + size.to_bytes(8, "big"))
    if direction == "down":
        got = 0
        while True:
            n = conn.recv_into(CHUNK)
            if n == 0:
                break
            got += n
    else:
        left = size
        while left > 0:
            left -= conn.send(CHUNK[: min(left, len(CHUNK))])
        conn.shutdown(socket.SHUT_WR)
        got = int.from_bytes(recv_exact(conn, 8), "big")
    elapsed = time.perf_counter() - start
    if got != size:
        sys.exit(f"{direction}: {got} of {size} bytes")
    print(f"{size / elapsed:.0f}")

if sys.argv[1] == "serve":
    serve(int(sys.argv[2]))
else:
    client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
PY

python3 "$work/blast.py" serve "$BLAST_PORT" &
pids+=($!)
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)

# --- the proxies ------------------------------------------------------------------------------
# The process whose CPU a transfer (PID) or the new connections (CONNECT_PID) charge, per target.
declare -A PID CONNECT_PID
start_trafik() { # listen-port backend-port
  RUST_LOG=warn "$trafik" proxy --mode tcp --listen "127.0.0.1:$1" --to "127.0.0.1:$2" \
    --workers "$WORKERS" --retries 0 >/dev/null &
  pids+=($!)
}
start_trafik "${TRANSFER_PORT[trafik]}" "$BLAST_PORT"
PID[trafik]=$!
start_trafik "${CONNECT_PORT[trafik]}" "$UPSTREAM_PORT"
CONNECT_PID[trafik]=$!

start_haproxy() { # name extra-option
  cat >"$work/$1.cfg" <<CONF
global
  nbthread $WORKERS
  maxconn 4000
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  $2
listen transfer
  bind 127.0.0.1:${TRANSFER_PORT[$1]}
  server s1 127.0.0.1:$BLAST_PORT
listen connect
  bind 127.0.0.1:${CONNECT_PORT[$1]}
  server s1 127.0.0.1:$UPSTREAM_PORT
CONF
  haproxy -db -f "$work/$1.cfg" >"$work/$1.out" 2>&1 &
  pids+=($!)
  PID[$1]=$!
  CONNECT_PID[$1]=$!
}
start_haproxy haproxy ""
start_haproxy haproxy-splice "option splice-auto"

for target in "${TARGETS[@]}"; do
  wait_for_port "${TRANSFER_PORT[$target]}"
  wait_for_port "${CONNECT_PORT[$target]}"
done

# --- measuring --------------------------------------------------------------------------------
declare -A DOWN UP DOWN_CPU UP_CPU CONNS CPU KERNEL REST BUSY

transfer() { # target direction → appends bytes/s and CPU s/GiB
  local target=$1 direction=$2 pid=${PID[$1]:-} before after rate cpu="-"
  [[ -n $pid ]] && before=$(ticks "$pid")
  rate=$(python3 "$work/blast.py" client "${TRANSFER_PORT[$target]}" "$direction" "$SIZE")
  [[ -n $pid ]] && after=$(ticks "$pid")
  if [[ -n $pid ]]; then
    cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v size="$SIZE" 'BEGIN { printf "%.3f", t / hz / (size / 2^30) }')
  fi
  if [[ $direction == down ]]; then
    DOWN[$target]="${DOWN[$target]:-} $rate"; DOWN_CPU[$target]="${DOWN_CPU[$target]:-} $cpu"
  else
    UP[$target]="${UP[$target]:-} $rate"; UP_CPU[$target]="${UP_CPU[$target]:-} $cpu"
  fi
}

connections() { # target → appends new connections/s and what the proxy and the machine spent (lib.sh's charge)
  local pid=${CONNECT_PID[$1]:-} out rate requests errors
  [[ -n $pid ]] && charge_start "$pid"
  out=$(wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -H "Connection: close" "http://127.0.0.1:${CONNECT_PORT[$1]}/takip/TR-4821")
  rate=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  [[ -n $pid ]] && charge "$1" "$pid" "$requests"
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $1: $errors" >&2
  CONNS[$1]="${CONNS[$1]:-} $rate"
}

gib() { awk -v b="$1" 'BEGIN { if (b == "-") print "-"; else printf "%.2f", b / 2^30 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

echo "trafik L4 bench: $((SIZE >> 20)) MiB per transfer, wrk -t2 -c$CONNECTIONS -d${DURATION}s with Connection: close, $ROUNDS interleaved rounds, $WORKERS proxy threads, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  for target in "${TARGETS[@]}"; do
    transfer "$target" down
    transfer "$target" up
    connections "$target"
  done
  echo "round $round done" >&2
done

printf '\n%-15s %11s %10s %10s %10s %12s %12s\n' target "down GiB/s" "CPU s/GiB" "up GiB/s" "CPU s/GiB" "new conns/s" "CPU µs/conn"
for target in "${TARGETS[@]}"; do
  printf '%-15s %11s %10s %10s %10s %12s %12s\n' "$target" \
    "$(gib "$(median "${DOWN[$target]}")")" "$(median "${DOWN_CPU[$target]}")" \
    "$(gib "$(median "${UP[$target]}")")" "$(median "${UP_CPU[$target]}")" \
    "$(median "${CONNS[$target]}")" "$(median "${CPU[$target]:-}")"
done
printf '\nnew connections: %-15s %8s %10s %6s\n' target kernel "rest µs" busy
for target in "${TARGETS[@]}"; do
  printf '                 %-15s %7s%% %10s %5s%%\n' "$target" "$(median "${KERNEL[$target]:-}")" "$(median "${REST[$target]:-}")" "$(median "${BUSY[$target]:-}")"
done
echo "(kernel: the proxy's CPU spent in the kernel; rest: wrk's, the replica's and the kernel's other work per"
echo " connection; ceiling: the new-connection ratio trafik would reach if its user-space work cost nothing)"
for peer in haproxy haproxy-splice; do
  printf '\ntrafik/%-15s download %s×  upload %s×  CPU per GiB %s× / %s×  new connections/s %s× (ceiling %s×)  CPU per connection %s×' "$peer" \
    "$(ratio "$(median "${DOWN[trafik]}")" "$(median "${DOWN[$peer]}")")" \
    "$(ratio "$(median "${UP[trafik]}")" "$(median "${UP[$peer]}")")" \
    "$(ratio "$(median "${DOWN_CPU[trafik]}")" "$(median "${DOWN_CPU[$peer]}")")" \
    "$(ratio "$(median "${UP_CPU[trafik]}")" "$(median "${UP_CPU[$peer]}")")" \
    "$(ratio "$(median "${CONNS[trafik]}")" "$(median "${CONNS[$peer]}")")" "$(ceiling trafik "$peer")" \
    "$(ratio "$(median "${CPU[trafik]}")" "$(median "${CPU[$peer]}")")"
done
echo
