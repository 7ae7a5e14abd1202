#!/usr/bin/env bash
# Static files: trafik's static route vs nginx (sendfile on), in one run on loopback, serving
# the same files: the course's lesson-4 assets (20 files, 216,000 bytes) and a 10.8 KB page, written to a temporary
# folder. For each path, both are driven with the same wrk command in interleaved rounds.
# Prints req/s, p50, the server's CPU µs per request and what the rest of the machine spent
# (medians; lib.sh's `report`), then trafik/nginx per path.
#
#   bench/static.sh                               # logo.svg (4 KB), ozet.html (10.8 KB, the
#                                                 # size the one-pipeline issue names) and
#                                                 # uygulama.js (120 KB)
#   PATHS="/varlik/bicem.css" DURATION=10 ROUNDS=5 bench/static.sh
#
# Needs: wrk nginx (apt-get install wrk nginx) and cargo.
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
PATHS=${PATHS:-/varlik/logo.svg /varlik/ozet.html /varlik/uygulama.js}

for tool in wrk nginx cargo; do
  command -v "$tool" >/dev/null || { echo "bench/static.sh needs $tool (apt-get install wrk nginx)" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 2)}
TRAFIK_PORT=$BASE_PORT
NGINX_PORT=$((BASE_PORT + 1))

mkdir -p "$work/varlik"
chmod 755 "$work" "$work/varlik" # nginx's workers run as an unprivileged user
for asset in kabuk.html:6000 bicem.css:40000 uygulama.js:120000 yazitipi.woff2:28000 logo.svg:4000 ozet.html:10800; do
  head -c "${asset#*:}" /dev/zero | tr '\0' x >"$work/varlik/${asset%%:*}"
done
for i in $(seq 15); do head -c 1200 /dev/zero | tr '\0' x >"$work/varlik/simge-$i.svg"; done

cat >"$work/trafik.toml" <<CONF
[server]
name = "statik"
workers = $WORKERS
[[listener]]
name = "icerik"
listen = "127.0.0.1:$TRAFIK_PORT"
[[listener.route]]
path_prefix = "/varlik"
static = "varlik"
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
  include /etc/nginx/mime.types;
  sendfile on;
  tcp_nopush on;
  open_file_cache max=1000 inactive=60s;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location /varlik/ { alias $work/varlik/; }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
nginx_pid=$!
pids+=("$nginx_pid")
for port in "$TRAFIK_PORT" "$NGINX_PORT"; do wait_for_port "$port"; done

declare -A RPS P50 CPU KERNEL REST BUSY
names=()
echo "static files: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, $ROUNDS interleaved rounds, $WORKERS workers each, $(nproc) cores"
for path in $PATHS; do
  for port in "$TRAFIK_PORT" "$NGINX_PORT"; do
    cmp -s <(curl -s "http://127.0.0.1:$port$path") "$work${path}" || { echo "port $port serves $path wrong" >&2; exit 1; }
  done
  file=${path##*/}
  names+=("trafik $file" "nginx $file")
  for _ in $(seq "$ROUNDS"); do
    measure "trafik $file" "$TRAFIK_PORT" "$trafik_pid" "$path"
    measure "nginx $file" "$NGINX_PORT" "$nginx_pid" "$path"
  done
done
report "${names[@]}"
echo
for path in $PATHS; do
  file=${path##*/}
  printf 'trafik/nginx %-14s req/s %s× (ceiling %s×)   CPU per request %s×\n' "$file" \
    "$(ratio "$(median "${RPS[trafik $file]}")" "$(median "${RPS[nginx $file]}")")" "$(ceiling "trafik $file" "nginx $file")" \
    "$(ratio "$(median "${CPU[trafik $file]}")" "$(median "${CPU[nginx $file]}")")"
done
echo "(ceiling: the req/s ratio trafik would reach if its user-space work cost nothing; lib.sh)"
echo "goal (one-pipeline issue): req/s ≥ 1.2× nginx (10.8 KB)"
