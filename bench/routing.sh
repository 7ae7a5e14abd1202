#!/usr/bin/env bash
# The cost of richer routing: the same replica behind a plain route, and behind a route chosen
# by a header (`headers = { "x-surum" = "beta" }`, beside a catch-all) whose path is rewritten
# (`strip_prefix = "/api"`); nginx with a plain location and with the same `if` on the header
# and `rewrite … break`, as the peer. One `trafik upstream` replica, one trafik with two
# listeners, one nginx with two servers; wrk drives each in interleaved rounds. Prints req/s,
# p50 and the proxy's CPU microseconds per request (utime+stime from /proc), medians over the
# rounds, then routed/plain for each proxy (the goal for trafik: ≤ 1.1×). Every process it starts
# is stopped by its PID on exit.
#
#   bench/routing.sh                        # 5 s per target, 3 rounds, 64 connections
#   DURATION=10 ROUNDS=5 bench/routing.sh
#
# Needs: wrk nginx (apt-get install wrk nginx) and cargo.
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}

for tool in wrk nginx python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench/routing.sh needs $tool (apt-get install wrk nginx)" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"

UPSTREAM_PORT=$(free_port)
PLAIN_PORT=$(free_port)
ROUTED_PORT=$(free_port)
NGINX_PORT=$(free_port)
NGINX_ROUTED_PORT=$(free_port)

RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

cat >"$work/trafik.toml" <<CONF
[server]
workers = $WORKERS

[[listener]]
name = "plain"
listen = "127.0.0.1:$PLAIN_PORT"
[[listener.route]]
pool = "k"

[[listener]]
name = "routed"
listen = "127.0.0.1:$ROUTED_PORT"
[[listener.route]]
path_prefix = "/api"
headers = { "x-surum" = "beta" }
strip_prefix = "/api"
pool = "k"
[[listener.route]]
pool = "k"

[[pool]]
name = "k"
backends = [{ address = "127.0.0.1:$UPSTREAM_PORT" }]
CONF
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
  upstream up { server 127.0.0.1:$UPSTREAM_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$NGINX_ROUTED_PORT;
    location /api/ {
      if (\$http_x_surum = "beta") { rewrite ^/api(/.*)\$ \$1 break; }
      proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
    }
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")

for port in "$PLAIN_PORT" "$ROUTED_PORT" "$NGINX_PORT" "$NGINX_ROUTED_PORT"; do
  wait_for_port "$port"
done
# Both routed servers must reach the replica's tracking path through the rewrite.
for port in "$ROUTED_PORT" "$NGINX_ROUTED_PORT"; do
  status=$(curl -s -o /dev/null -w '%{http_code}' -H 'x-surum: beta' "http://127.0.0.1:$port/api$PATH_UNDER_TEST")
  [[ $status == 200 ]] || { echo "the routed server on $port answered $status" >&2; exit 1; }
done

declare -A RPS P50 CPU KERNEL REST BUSY
echo "routing: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS round(s), $WORKERS workers each, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  measure trafik "$PLAIN_PORT" "$trafik_pid" "$PATH_UNDER_TEST"
  WRK_HEADER="x-surum: beta" measure trafik+routed "$ROUTED_PORT" "$trafik_pid" "/api$PATH_UNDER_TEST"
  measure nginx "$NGINX_PORT" "$nginx_pid" "$PATH_UNDER_TEST"
  WRK_HEADER="x-surum: beta" measure nginx+routed "$NGINX_ROUTED_PORT" "$nginx_pid" "/api$PATH_UNDER_TEST"
done

report trafik trafik+routed nginx nginx+routed
printf '\nrouted/plain CPU per request: trafik %s×, nginx %s× (goal for trafik: ≤ 1.1×)\n' \
  "$(ratio "$(median "${CPU[trafik+routed]}")" "$(median "${CPU[trafik]}")")" \
  "$(ratio "$(median "${CPU[nginx+routed]}")" "$(median "${CPU[nginx]}")")"
printf 'trafik+routed/nginx+routed CPU per request: %s×\n' \
  "$(ratio "$(median "${CPU[trafik+routed]}")" "$(median "${CPU[nginx+routed]}")")"
