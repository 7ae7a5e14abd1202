#!/usr/bin/env bash
# trafik vs nginx terminating TLS, in one run on loopback, with the same certificate (the demo
# one in examples/certs: ECDSA P-256) in front of the same `trafik upstream` replica.
#
# Three measurements, each in interleaved rounds (trafik, nginx, trafik, nginx, …), medians:
#   keep-alive   wrk over HTTPS/1.1 on kept-alive connections: req/s, p50, p99, CPU µs/request;
#   handshakes   wrk with `Connection: close`, so every request is a new TCP connection and a full
#                TLS handshake (wrk keeps no session to resume): handshakes/s, CPU µs/handshake;
#   h2           h2load over HTTPS/2 (ALPN h2), several streams per connection: req/s, CPU µs/req.
# CPU is utime+stime of the proxy's processes and threads from /proc over the run. Ratios
# trafik/nginx follow. Every process it starts is stopped by its PID on exit.
#
#   bench/https.sh                                  # 10 s per run, 3 rounds
#   DURATION=5 ROUNDS=5 CONNECTIONS=128 bench/https.sh
#
# Needs: wrk nginx h2load (apt-get install wrk nginx nghttp2-client) and cargo.
set -euo pipefail

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
H2_CONNECTIONS=${H2_CONNECTIONS:-16}
H2_STREAMS=${H2_STREAMS:-10}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}

for tool in wrk nginx h2load cargo; do
  command -v "$tool" >/dev/null || { echo "bench/https.sh needs $tool (apt-get install wrk nginx nghttp2-client)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 3)}

UPSTREAM_PORT=$BASE_PORT
TRAFIK_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
cert="$root/examples/certs/localhost.pem"
key="$root/examples/certs/localhost.key"

# --- the upstream and the two proxies ---------------------------------------------------------
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

RUST_LOG=warn "$trafik" proxy --listen "127.0.0.1:$TRAFIK_PORT" --to "127.0.0.1:$UPSTREAM_PORT" \
  --workers "$WORKERS" --tls-cert "$cert" --tls-key "$key" >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")

# nginx's defaults for what trafik does by default too: TLS 1.2 and 1.3, session tickets on,
# HTTP/2 by ALPN; upstream keep-alive as in bench/proxy.sh.
mkdir -p "$work/nginx/logs" "$work/nginx/tmp"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes $WORKERS;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  upstream up { server 127.0.0.1:$UPSTREAM_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT ssl http2;
    ssl_certificate $cert;
    ssl_certificate_key $key;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")

for port in "$TRAFIK_PORT" "$NGINX_PORT"; do wait_for_port "$port"; done

# --- measuring ---------------------------------------------------------------------------------
declare -A RPS P50 P99 CPU KERNEL REST BUSY

record() { # measurement name rps p50 p99
  local key="$1 $2"
  RPS[$key]="${RPS[$key]:-} $3"; P50[$key]="${P50[$key]:-} $4"; P99[$key]="${P99[$key]:-} $5"
}

with_wrk() { # measurement name port pid [wrk options…]
  local measurement=$1 name=$2 port=$3 pid=$4 out
  shift 4
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s "$@" "https://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null # warm-up
  charge_start "$pid"
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" "https://127.0.0.1:$port$PATH_UNDER_TEST")
  charge "$measurement $name" "$pid" "$(awk '/requests in/ {print $1}' <<<"$out")"
  local errors
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $measurement $name: $errors" >&2
  record "$measurement" "$name" "$(awk '/^Requests\/sec/ {print $2}' <<<"$out")" \
    "$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")" "$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")"
}

with_h2load() { # name port pid
  local name=$1 port=$2 pid=$3 out
  local load=(h2load -c "$H2_CONNECTIONS" -m "$H2_STREAMS" -t "$THREADS")
  "${load[@]}" -D 1 "https://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null # warm-up
  charge_start "$pid"
  out=$("${load[@]}" -D "$DURATION" "https://127.0.0.1:$port$PATH_UNDER_TEST")
  charge "h2 $name" "$pid" "$(awk '/^requests:/ {print $8}' <<<"$out")"
  grep -q 'Application protocol: h2' <<<"$out" || echo "warning: h2 $name: not HTTP/2" >&2
  record h2 "$name" "$(awk '/^finished in/ {print $4}' <<<"$out")" - -
}

echo "trafik https bench: $DURATION s per run, $ROUNDS interleaved rounds, $WORKERS proxy workers, $(nproc) cores"
echo "  keep-alive: wrk -t$THREADS -c$CONNECTIONS; handshakes: the same with Connection: close; h2: h2load -c$H2_CONNECTIONS -m$H2_STREAMS -t$THREADS"
for round in $(seq "$ROUNDS"); do
  for target in "trafik $TRAFIK_PORT $trafik_pid" "nginx $NGINX_PORT $nginx_pid"; do
    read -r name port pid <<<"$target"
    with_wrk keep-alive "$name" "$port" "$pid"
    with_wrk handshakes "$name" "$port" "$pid" -H "Connection: close"
    with_h2load "$name" "$port" "$pid"
  done
done

printf '\n%-11s %-7s %12s %9s %9s %12s %7s %9s %6s\n' measurement target "per second" "p50 ms" "p99 ms" "CPU µs each" kernel "rest µs" busy
for measurement in keep-alive handshakes h2; do
  for name in trafik nginx; do
    key="$measurement $name"
    printf '%-11s %-7s %12s %9s %9s %12s %6s%% %9s %5s%%\n' "$measurement" "$name" "$(median "${RPS[$key]}")" \
      "$(median "${P50[$key]}")" "$(median "${P99[$key]}")" "$(median "${CPU[$key]}")" \
      "$(median "${KERNEL[$key]}")" "$(median "${REST[$key]}")" "$(median "${BUSY[$key]}")"
  done
done
echo
for measurement in keep-alive handshakes h2; do
  printf 'trafik/nginx %-11s per second %s× (ceiling %s×)   CPU each %s×\n' "$measurement" \
    "$(ratio "$(median "${RPS[$measurement trafik]}")" "$(median "${RPS[$measurement nginx]}")")" \
    "$(ceiling "$measurement trafik" "$measurement nginx")" \
    "$(ratio "$(median "${CPU[$measurement trafik]}")" "$(median "${CPU[$measurement nginx]}")")"
done
echo "(kernel: the proxy's CPU spent in the kernel; rest: the load generator's, the upstream's and the"
echo " kernel's other work each; ceiling: the ratio trafik would reach if its user-space work cost nothing)"
