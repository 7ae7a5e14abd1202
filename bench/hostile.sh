#!/usr/bin/env bash
# Hostile peers (issue 23), against a release trafik:
# 1. An endless upstream head: a backend sends `HTTP/1.1 200 OK\r\nX-E: ` then header bytes
#    without end. Prints how long the client waits for trafik's 502 (curl's time_total,
#    median of ROUNDS) and trafik's RSS before and after (goal: < 1 MiB more, ≤ 50 ms).
# 2. Trickling uploads: CLIENTS clients send a head and then one body byte a second, through a
#    route without and one with `request_buffering = "on"`. Prints the backend connections
#    trafik holds for them after 5 s (goal with buffering: 0).
# Usage: bench/hostile.sh [CLIENTS] [ROUNDS]   (TRAFIK=path/to/trafik skips the release build)
set -euo pipefail
clients=${1:-1000}
rounds=${2:-5}
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
endless_port=$(free_port)
backend_port=$(free_port)
proxy_port=$(free_port)

cat >"$work/endless.py" <<'PY'
import socket, sys, threading
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(64)
def answer(conn):
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-E: ")
        filler = b"e" * 65536
        for _ in range(16384):  # at most 1 GiB, until trafik stops reading
            conn.sendall(filler)
    except OSError:
        pass
    finally:
        conn.close()
while True:
    conn, _ = listener.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
PY

cat >"$work/trickle.py" <<'PY'
import socket, sys, time
port, path, count, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
socks = []
for n in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST %s HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n" % path.encode())
    socks.append(s)
end = time.time() + seconds
while time.time() < end:
    time.sleep(1)
    for s in socks:
        try:
            s.send(b"x")
        except OSError:
            pass
PY

python3 "$work/endless.py" "$endless_port" &
pids+=($!)
"$trafik" upstream --listen "127.0.0.1:$backend_port" --name k1 >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$endless_port"
wait_for_port "$backend_port"
cat >"$work/proxy.toml" <<TOML
[server.limits]
min_body_rate = 0          # the trickle below must last; the buffering alone is measured

[[listener]]
name = "web"
listen = "127.0.0.1:$proxy_port"

[[listener.route]]
path_prefix = "/endless"
pool = "endless"

[[listener.route]]
path_prefix = "/streamed"
pool = "tek"

[[listener.route]]
path_prefix = "/buffered"
pool = "tek"
request_buffering = "on"

[[pool]]
name = "endless"
retries = 0
backends = [{ address = "127.0.0.1:$endless_port" }]

[[pool]]
name = "tek"
backends = [{ address = "127.0.0.1:$backend_port" }]
TOML
"$trafik" serve -c "$work/proxy.toml" >"$work/proxy.log" 2>&1 &
proxy=$!
pids+=($proxy)
wait_for_port "$proxy_port"
rss() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }

echo "endless upstream head"
curl -s -o /dev/null "http://127.0.0.1:$proxy_port/endless" || true
before=$(rss "$proxy")
times=""
for _ in $(seq "$rounds"); do
  read -r code seconds < <(curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$proxy_port/endless")
  times+=" $(awk -v s="$seconds" 'BEGIN { printf "%.1f", s * 1000 }')"
done
after=$(rss "$proxy")
echo "  answer $code in $(median "$times") ms (median of $rounds); RSS $before KiB before, $after KiB after ($((after - before)) KiB more)"

held() { ss -Htn state established "( dport = :$backend_port )" | wc -l; }
for path in /streamed /buffered; do
  python3 "$work/trickle.py" "$proxy_port" "$path" "$clients" 8 &
  trickler=$!
  pids+=($trickler)
  sleep 5
  echo "$path: $clients clients trickling bodies hold $(held) backend connections"
  wait "$trickler" || true
  sleep 1
done
