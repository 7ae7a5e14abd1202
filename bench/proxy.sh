#!/usr/bin/env bash
# trafik vs nginx vs haproxy as HTTP/1.1 reverse proxies, in one run on loopback.
#
# Starts one `trafik upstream` replica, then trafik, nginx and haproxy (Debian packages, in the
# foreground with generated configs) proxying to it, and drives each — and the upstream directly —
# with the same wrk command. Prints req/s, p50, p99 and the proxy's CPU microseconds per request
# (utime+stime from /proc over the run, all of the proxy's processes and threads), then the ratios
# trafik/nginx and trafik/haproxy. Every process it starts is stopped by its PID on exit.
#
#   bench/proxy.sh                      # 10 s per target, 2 wrk threads, 64 connections
#   DURATION=5 CONNECTIONS=128 ROUNDS=3 bench/proxy.sh
#
# Needs: wrk nginx haproxy (apt-get install wrk nginx haproxy) and cargo.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
WORKERS=${WORKERS:-2}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}
BASE_PORT=${BASE_PORT:-18300}

UPSTREAM_PORT=$BASE_PORT
TRAFIK_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
HAPROXY_PORT=$((BASE_PORT + 3))

for tool in wrk nginx haproxy cargo; do
  command -v "$tool" >/dev/null || { echo "bench/proxy.sh needs $tool (apt-get install wrk nginx haproxy)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"

# --- the upstream and the three proxies -----------------------------------------------------
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

RUST_LOG=warn "$trafik" proxy --listen "127.0.0.1:$TRAFIK_PORT" --to "127.0.0.1:$UPSTREAM_PORT" \
  --workers "$WORKERS" >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")

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
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")

cat >"$work/haproxy.cfg" <<CONF
global
  nbthread $WORKERS
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind 127.0.0.1:$HAPROXY_PORT
  default_backend be
backend be
  server s1 127.0.0.1:$UPSTREAM_PORT
CONF
haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.out" 2>&1 &
haproxy_pid=$!
pids+=("$haproxy_pid")

for port in "$TRAFIK_PORT" "$NGINX_PORT" "$HAPROXY_PORT"; do wait_for_port "$port"; done

# --- measuring --------------------------------------------------------------------------------
declare -A RPS P50 P99 CPU

run() { # name port pid-to-charge (empty: none)
  local name=$1 port=$2 pid=${3:-} before after out
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s "http://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null # warm-up
  [[ -n $pid ]] && before=$(ticks "$pid")
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "http://127.0.0.1:$port$PATH_UNDER_TEST")
  [[ -n $pid ]] && after=$(ticks "$pid")
  local rps requests p50 p99 errors
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $name: $errors" >&2
  local cpu="-"
  if [[ -n $pid ]]; then
    cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
  fi
  RPS[$name]="${RPS[$name]:-} $rps"; P50[$name]="${P50[$name]:-} $p50"; P99[$name]="${P99[$name]:-} $p99"; CPU[$name]="${CPU[$name]:-} $cpu"
}

echo "trafik bench: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s $PATH_UNDER_TEST, $ROUNDS round(s), $WORKERS proxy workers, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  run direct "$UPSTREAM_PORT"
  run trafik "$TRAFIK_PORT" "$trafik_pid"
  run nginx "$NGINX_PORT" "$nginx_pid"
  run haproxy "$HAPROXY_PORT" "$haproxy_pid"
done

printf '\n%-8s %12s %9s %9s %14s\n' target "req/s" "p50 ms" "p99 ms" "CPU µs/req"
for name in direct trafik nginx haproxy; do
  printf '%-8s %12s %9s %9s %14s\n' "$name" "$(median "${RPS[$name]}")" "$(median "${P50[$name]}")" "$(median "${P99[$name]}")" "$(median "${CPU[$name]}")"
done
t_rps=$(median "${RPS[trafik]}"); t_cpu=$(median "${CPU[trafik]}")
for peer in nginx haproxy; do
  printf '\ntrafik/%-7s req/s %s×   CPU per request %s×' "$peer" \
    "$(ratio "$t_rps" "$(median "${RPS[$peer]}")")" "$(ratio "$t_cpu" "$(median "${CPU[$peer]}")")"
done
echo
echo "goal: req/s ≥ 1.10× nginx and CPU per request ≤ 0.80× nginx"
