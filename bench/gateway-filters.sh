#!/usr/bin/env bash
# The cost of the gateway stages: the same route through trafik without filters, with JWT
# verification (HS256), with the local rate limiter, with both (the issue's "JWT + limit"
# shape) and with the Redis rate limiter, and nginx
# without and with `limit_req` as the peer for the local limiter. The limits are set high
# enough that every request passes, so what is measured is the check, not refusals.
#
# One `trafik upstream` replica, one trafik with four listeners (one route each), one nginx with
# two servers, one redis-server; wrk drives each in interleaved rounds. Prints req/s, p50, p99
# and the proxy's CPU microseconds per request (utime+stime from /proc), medians over the
# rounds, then each filter's cost in µs of CPU per request over the plain route. Every process
# it starts is stopped by its PID on exit.
#
#   bench/gateway-filters.sh                       # 5 s per target, 3 rounds, 64 connections
#   DURATION=10 ROUNDS=5 bench/gateway-filters.sh
#
# Needs: wrk nginx redis-server (apt-get install wrk nginx redis-server) and cargo.
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}

for tool in wrk nginx redis-server python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench/gateway-filters.sh needs $tool (apt-get install wrk nginx redis-server)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 9)}
UPSTREAM_PORT=$BASE_PORT
PLAIN_PORT=$((BASE_PORT + 1))
JWT_PORT=$((BASE_PORT + 2))
LOCAL_PORT=$((BASE_PORT + 3))
REDIS_LIMIT_PORT=$((BASE_PORT + 4))
NGINX_PORT=$((BASE_PORT + 5))
NGINX_LIMIT_PORT=$((BASE_PORT + 6))
REDIS_PORT=$((BASE_PORT + 7))
JWT_LOCAL_PORT=$((BASE_PORT + 8))

SECRET=trafik-ornek-anahtar
TOKEN=$(bearer_token "$SECRET")

# --- the upstream, Redis, trafik and nginx ----------------------------------------------------
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
redis-server --port "$REDIS_PORT" --save '' --appendonly no >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"
wait_for_port "$REDIS_PORT"

listener() { # name port [extra route tables]
  printf '\n[[listener]]\nname = "%s"\nlisten = "127.0.0.1:%s"\n\n[[listener.route]]\npool = "k"\n%s\n' "$1" "$2" "${3:-}"
}
{
  printf '[server]\nworkers = %s\n' "$WORKERS"
  listener plain "$PLAIN_PORT"
  jwt=$(printf '[listener.route.jwt]\nalgorithm = "HS256"\nsecret = "%s"\nissuer = "trafik-ornek"\nforward_claims = ["sub: x-kullanici"]' "$SECRET")
  local_limit=$(printf '[listener.route.rate_limit]\nrate = 100000000\nburst = 100000000\nkey = "client-ip"')
  listener jwt "$JWT_PORT" "$jwt"
  listener local "$LOCAL_PORT" "$local_limit"
  listener jwt-local "$JWT_LOCAL_PORT" "$jwt"$'\n'"$local_limit"
  listener redis "$REDIS_LIMIT_PORT" "$(printf '[listener.route.rate_limit]\nrate = 100000000\nburst = 100000000\nkey = "client-ip"\nredis = "127.0.0.1:%s"\non_redis_error = "closed"' "$REDIS_PORT")"
  printf '\n[[pool]]\nname = "k"\nbackends = [{ address = "127.0.0.1:%s" }]\n' "$UPSTREAM_PORT"
} >"$work/trafik.toml"
RUST_LOG=warn "$trafik" serve -c "$work/trafik.toml" >/dev/null &
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
  limit_req_zone \$binary_remote_addr zone=per_ip:10m rate=100000000r/s;
  upstream up { server 127.0.0.1:$UPSTREAM_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$NGINX_LIMIT_PORT;
    location / {
      limit_req zone=per_ip burst=100000000 nodelay;
      proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
    }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")

for port in "$PLAIN_PORT" "$JWT_PORT" "$LOCAL_PORT" "$JWT_LOCAL_PORT" "$REDIS_LIMIT_PORT" "$NGINX_PORT" "$NGINX_LIMIT_PORT"; do
  wait_for_port "$port"
done
status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$JWT_PORT$PATH_UNDER_TEST")
[[ $status == 200 ]] || { echo "the JWT route answered $status to the bench's token" >&2; exit 1; }

# --- measuring --------------------------------------------------------------------------------
declare -A RPS P50 P99 CPU

run() { # name port pid-to-charge [wrk header]
  local name=$1 port=$2 pid=$3 header=${4:-X-Bench: 1} before after out
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s -H "$header" "http://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null
  before=$(ticks "$pid")
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -H "$header" "http://127.0.0.1:$port$PATH_UNDER_TEST")
  after=$(ticks "$pid")
  local rps requests p50 p99 errors cpu
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $name: $errors" >&2
  cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
  RPS[$name]="${RPS[$name]:-} $rps"; P50[$name]="${P50[$name]:-} $p50"; P99[$name]="${P99[$name]:-} $p99"; CPU[$name]="${CPU[$name]:-} $cpu"
}

names=(trafik trafik+jwt trafik+local trafik+jwt+local trafik+redis nginx nginx+limit_req)
echo "gateway filters: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s $PATH_UNDER_TEST, $ROUNDS round(s), $WORKERS workers each, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  run trafik "$PLAIN_PORT" "$trafik_pid"
  run trafik+jwt "$JWT_PORT" "$trafik_pid" "Authorization: Bearer $TOKEN"
  run trafik+local "$LOCAL_PORT" "$trafik_pid"
  run trafik+jwt+local "$JWT_LOCAL_PORT" "$trafik_pid" "Authorization: Bearer $TOKEN"
  run trafik+redis "$REDIS_LIMIT_PORT" "$trafik_pid"
  run nginx "$NGINX_PORT" "$nginx_pid"
  run nginx+limit_req "$NGINX_LIMIT_PORT" "$nginx_pid"
done

printf '\n%-16s %12s %9s %9s %14s %18s\n' target "req/s" "p50 ms" "p99 ms" "CPU µs/req" "filter µs/req"
for name in "${names[@]}"; do
  base=trafik; [[ $name == nginx* ]] && base=nginx
  cost=$(awk -v a="$(median "${CPU[$name]}")" -v b="$(median "${CPU[$base]}")" 'BEGIN { printf "%+.2f", a - b }')
  [[ $name == "$base" ]] && cost="-"
  printf '%-16s %12s %9s %9s %14s %18s\n' "$name" "$(median "${RPS[$name]}")" "$(median "${P50[$name]}")" \
    "$(median "${P99[$name]}")" "$(median "${CPU[$name]}")" "$cost"
done
printf '\ntrafik+jwt+local/trafik        CPU per request %s× (goal ≤ 1.25×)\n' \
  "$(ratio "$(median "${CPU[trafik+jwt+local]}")" "$(median "${CPU[trafik]}")")"
printf 'trafik+local/nginx+limit_req   req/s %s×   CPU per request %s×\n' \
  "$(ratio "$(median "${RPS[trafik+local]}")" "$(median "${RPS[nginx+limit_req]}")")" \
  "$(ratio "$(median "${CPU[trafik+local]}")" "$(median "${CPU[nginx+limit_req]}")")"
echo "(the Redis limiter's CPU is trafik's only; redis-server's own is not charged)"
