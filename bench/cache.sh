#!/usr/bin/env bash
# Cache hits: trafik's edge cache vs nginx proxy_cache, in one run on loopback, in front of the
# same `trafik upstream` replica. Both are warmed with one request, then driven with the same wrk
# command in interleaved rounds; every answer is a hit (the script checks that the replica saw
# no request during the runs). Prints req/s, p50 and the proxy's CPU µs per request (medians),
# then trafik/nginx. Every process it starts is stopped by its PID on exit.
#
#   bench/cache.sh                          # 5 s per target, 3 rounds, 2 workers each
#   DURATION=10 ROUNDS=5 CONNECTIONS=128 bench/cache.sh
#
# Needs: wrk nginx (apt-get install wrk nginx) and cargo.
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR900011}

for tool in wrk nginx cargo; do
  command -v "$tool" >/dev/null || { echo "bench/cache.sh needs $tool (apt-get install wrk nginx)" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 4)}
EVICTION=${EVICTION:-lru}   # the trafik cache's policy: lru or admission
UPSTREAM_PORT=$BASE_PORT
TRAFIK_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
ADMIN_PORT=$((BASE_PORT + 3))

RUST_LOG=warn "$trafik" upstream --name koken --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

cat >"$work/trafik.toml" <<CONF
[server]
name = "kenar"
workers = $WORKERS
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[[listener]]
name = "kenar"
listen = "127.0.0.1:$TRAFIK_PORT"
[[listener.route]]
pool = "koken"
cache = "kenar"
[[pool]]
name = "koken"
backends = [{ address = "127.0.0.1:$UPSTREAM_PORT" }]
[[cache]]
name = "kenar"
default_ttl = "1h"
eviction = "$EVICTION"
[cache.header]
name = "x-cache"
hit = "HIT"
miss = "MISS"
CONF
RUST_LOG=warn "$trafik" serve -c "$work/trafik.toml" >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")

mkdir -p "$work/nginx/logs" "$work/nginx/tmp" "$work/nginx/cache"
# nginx's workers run as an unprivileged user: they must be able to write their cache.
chmod 755 "$work" "$work/nginx"
chmod 777 "$work/nginx/cache" "$work/nginx/tmp"
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
  proxy_cache_path $work/nginx/cache levels=1:2 keys_zone=kenar:10m max_size=256m inactive=1h use_temp_path=off;
  upstream up { server 127.0.0.1:$UPSTREAM_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_cache kenar; proxy_cache_valid 200 1h; proxy_cache_lock on;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")
for port in "$TRAFIK_PORT" "$NGINX_PORT"; do wait_for_port "$port"; done

for port in "$TRAFIK_PORT" "$NGINX_PORT"; do
  curl -s -o /dev/null "http://127.0.0.1:$port$PATH_UNDER_TEST"
  curl -s -D - -o /dev/null "http://127.0.0.1:$port$PATH_UNDER_TEST" | grep -qi '^x-cache: HIT' ||
    { echo "port $port does not answer from its cache" >&2; exit 1; }
done
origin_before=$(curl -s "http://127.0.0.1:$UPSTREAM_PORT/sayac" | sed 's/.*"istek":\([0-9]*\).*/\1/')

declare -A RPS P50 CPU KERNEL REST BUSY
echo "cache hits: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s $PATH_UNDER_TEST, $ROUNDS interleaved rounds, $WORKERS workers each, $(nproc) cores"
for _ in $(seq "$ROUNDS"); do
  measure trafik "$TRAFIK_PORT" "$trafik_pid" "$PATH_UNDER_TEST"
  measure nginx "$NGINX_PORT" "$nginx_pid" "$PATH_UNDER_TEST"
done
origin_after=$(curl -s "http://127.0.0.1:$UPSTREAM_PORT/sayac" | sed 's/.*"istek":\([0-9]*\).*/\1/')
report trafik nginx
printf '\ntrafik/nginx  req/s %s× (ceiling %s×)   CPU per request %s×\n' \
  "$(ratio "$(median "${RPS[trafik]}")" "$(median "${RPS[nginx]}")")" "$(ceiling trafik nginx)" \
  "$(ratio "$(median "${CPU[trafik]}")" "$(median "${CPU[nginx]}")")"
echo "origin requests during the runs: $((origin_after - origin_before)) (every answer a hit)"
echo "(ceiling: the req/s ratio trafik would reach if its user-space work cost nothing; lib.sh)"
echo "goal (one-pipeline issue): req/s ≥ 2.0× nginx proxy_cache"
