#!/usr/bin/env bash
# HTTP/2 end to end: h2load (h2c, prior knowledge) → proxy → an h2c backend, for trafik (pool
# protocol = "h2c"), nginx (grpc_pass, its HTTP/2 upstream) and haproxy (server … proto h2), in
# one run on loopback, the targets interleaved within each round. haproxy runs twice: as
# configured by default, and as `haproxy+fwd` adding the five fields trafik adds to every
# request (lib.sh's HAPROXY_FORWARDING), the same work as trafik's.
#
# The backends are two nginx processes of one worker each, serving a fixed 6-byte answer over h2c
# (`listen … http2` on a plain listener), which every proxy takes in turn: so every proxy meets
# the same HTTP/2 servers, and each backend process serves half its requests. (With one nginx of
# two workers, a proxy's few long-lived backend connections landed on one nginx worker or on
# both, as the accepts fell, and that alone moved a proxy's req/s by 30 % and its CPU a request
# by 40 % from one start to the next, the same build against itself.) `direct` is h2load
# against one of the two. Prints the medians over the rounds of req/s and
# the proxy's CPU microseconds per request (utime+stime from /proc over the run, all of its
# processes and threads) with its kernel share, the rest of the machine's CPU per request, then
# trafik's ratios to each peer and the ceiling it would reach if its user-space work cost
# nothing (lib.sh's `ceiling`). Every process it starts is stopped by its PID on exit.
#
#   bench/h2-upstream.sh                           # 5 rounds of 100000 requests
#   REQUESTS=50000 ROUNDS=3 CLIENTS=16 STREAMS=10 bench/h2-upstream.sh
#   PGO=1 bench/h2-upstream.sh                     # trafik built with profile-guided
#                                                  # optimization (scripts/pgo-build.sh)
#
# Needs: h2load (nghttp2-client), nginx, haproxy (Debian packages) and cargo.
set -euo pipefail

REQUESTS=${REQUESTS:-100000}
CLIENTS=${CLIENTS:-16}
STREAMS=${STREAMS:-10}
ROUNDS=${ROUNDS:-5}
WORKERS=${WORKERS:-2}

for tool in h2load nginx haproxy cargo; do
  command -v "$tool" >/dev/null || { echo "bench/h2-upstream.sh needs $tool (apt-get install nghttp2-client nginx haproxy)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"

BACKEND_PORTS="$(free_port) $(free_port)"
TRAFIK_PORT=$(free_port)
NGINX_PORT=$(free_port)
HAPROXY_PORT=$(free_port)
HAPROXY_FWD_PORT=$(free_port)

# --- the backends: two nginx processes over h2c -------------------------------------------------
for port in $BACKEND_PORTS; do start_nginx_backend "$port" http2; done

# --- the proxies ---------------------------------------------------------------------------------
h2c_pool_config "$work/trafik.toml" "$TRAFIK_PORT" "$BACKEND_PORTS"
RUST_LOG=warn "$trafik" serve --config "$work/trafik.toml" >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")

upstream_servers=$(for port in $BACKEND_PORTS; do printf 'server 127.0.0.1:%s; ' "$port"; done)
nginx_conf "$work/front" "upstream up { $upstream_servers keepalive 128; }
  server { listen 127.0.0.1:$NGINX_PORT http2; location / { grpc_pass grpc://up; } }"
nginx -p "$work/front" -c "$work/front/nginx.conf" 2>"$work/front/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")

start_haproxy_http "$HAPROXY_PORT" "$BACKEND_PORTS" "proto h2" "proto h2"
haproxy_default_pid=$haproxy_pid
start_haproxy_http "$HAPROXY_FWD_PORT" "$BACKEND_PORTS" "proto h2" "proto h2" "$HAPROXY_FORWARDING"
haproxy_fwd_pid=$haproxy_pid

for port in "$TRAFIK_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$HAPROXY_FWD_PORT"; do wait_for_port "$port"; done

# --- measuring -----------------------------------------------------------------------------------
declare -A RPS CPU KERNEL REST BUSY
run() { # name port pid-to-charge (empty: none)
  local name=$1 port=$2 pid=${3:-} out rps done_ok
  h2load -n 2000 -c "$CLIENTS" -m "$STREAMS" "http://127.0.0.1:$port/takip" >/dev/null # warm-up
  [[ -n $pid ]] && charge_start "$pid"
  out=$(h2load -n "$REQUESTS" -c "$CLIENTS" -m "$STREAMS" "http://127.0.0.1:$port/takip")
  [[ -n $pid ]] && charge "$name" "$pid" "$REQUESTS"
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  done_ok=$(awk '/^status codes:/ {print $3}' <<<"$out")
  [[ $done_ok != "$REQUESTS" ]] && echo "warning: $name: $(grep -E '^(requests|status codes):' <<<"$out" | tr '\n' ' ')" >&2
  RPS[$name]="${RPS[$name]:-} $rps"
}

echo "h2 upstream bench: h2load -n $REQUESTS -c $CLIENTS -m $STREAMS (h2c), $ROUNDS round(s), $WORKERS proxy workers, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  run direct "${BACKEND_PORTS%% *}"
  run trafik "$TRAFIK_PORT" "$trafik_pid"
  run nginx "$NGINX_PORT" "$nginx_pid"
  run haproxy "$HAPROXY_PORT" "$haproxy_default_pid"
  run haproxy+fwd "$HAPROXY_FWD_PORT" "$haproxy_fwd_pid"
done

printf '\n%-12s %12s %11s %8s %10s %6s\n' target "req/s" "CPU µs/req" kernel "rest µs" busy
for name in direct trafik nginx haproxy haproxy+fwd; do
  printf '%-12s %12s %11s %7s%% %10s %5s%%\n' "$name" "$(median "${RPS[$name]}")" "$(median "${CPU[$name]:-}")" \
    "$(median "${KERNEL[$name]:-}")" "$(median "${REST[$name]:-}")" "$(median "${BUSY[$name]:-}")"
done
t_rps=$(median "${RPS[trafik]}"); t_cpu=$(median "${CPU[trafik]}")
for peer in nginx haproxy haproxy+fwd; do
  printf 'trafik /%-11s req/s %s× (ceiling %s×)   CPU per request %s×\n' "$peer" \
    "$(ratio "$t_rps" "$(median "${RPS[$peer]}")")" "$(ceiling trafik "$peer")" "$(ratio "$t_cpu" "$(median "${CPU[$peer]}")")"
done
echo "(kernel: the proxy's CPU spent in the kernel; rest: h2load's, the backend's and the kernel's other"
echo " work per request; ceiling: the req/s ratio trafik would reach if its user-space work cost nothing)"
echo
echo "goal: trafik req/s ≥ 1.0× and CPU per request ≤ 1.0× the better peer (nginx, haproxy)"
