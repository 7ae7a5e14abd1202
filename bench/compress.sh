#!/usr/bin/env bash
# Compression: trafik's `[listener.route.compress]` (gzip only) next to nginx's `gzip on`, both
# proxying the same JSON file (256 KB of varied tracking records) from the same origin (an nginx
# serving it plain), at the same gzip level, in one run on loopback, driven by the same wrk
# command (Accept-Encoding: gzip) in interleaved rounds. The figure is the proxy's CPU per
# compressed byte (CPU µs per request over the file's size: the same file, so the ratio is the
# CPU per request's); the origin's CPU is not counted. Also prints each one's compressed size.
#
#   bench/compress.sh                       # levels 1 (nginx's default) and 5 (trafik's)
#   LEVELS=6 DURATION=10 ROUNDS=5 bench/compress.sh
#
# Needs: wrk nginx curl (apt-get install wrk nginx curl) and cargo.
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-2}
LEVELS=${LEVELS:-1 5}

for tool in wrk nginx curl cargo python3; do
  command -v "$tool" >/dev/null || { echo "bench/compress.sh needs $tool (apt-get install wrk nginx curl)" >&2; exit 2; }
done
source "$(dirname "$0")/lib.sh"

mkdir -p "$work/site"
chmod 755 "$work" "$work/site" # nginx's workers run as an unprivileged user
python3 - "$work/site/veri.json" <<'PY'
import random, sys
random.seed(7)
words = ["takip", "kargo", "aktarma", "merkezinde", "teslim", "edildi", "dagitimda", "sube"]
lines = ['{"no":"TR-%d","durum":"%s %s","adim":%d}' % (random.randint(1000, 9999),
         random.choice(words), random.choice(words), random.randint(0, 9)) for _ in range(5200)]
open(sys.argv[1], "w").write("[" + ",\n".join(lines) + "]\n")
PY
size=$(stat -c %s "$work/site/veri.json")

origin_port=$(free_port)
mkdir -p "$work/origin/logs" "$work/proxy/logs" "$work/tmp"
nginx_conf() { # dir listen body
  cat >"$1/nginx.conf" <<CONF
worker_processes $4;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  include /etc/nginx/mime.types;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi;
  uwsgi_temp_path $work/tmp/uwsgi;
  scgi_temp_path $work/tmp/scgi;
  upstream origin { server 127.0.0.1:$origin_port; keepalive 64; }
  server {
    listen 127.0.0.1:$2;
    $3
  }
}
CONF
}
nginx_conf "$work/origin" "$origin_port" "location / { root $work/site; }" 1
nginx -p "$work/origin" -c "$work/origin/nginx.conf" 2>"$work/origin/stderr" &
pids+=($!)
wait_for_port "$origin_port"

declare -A RPS P50 CPU KERNEL REST BUSY SIZES
WRK_HEADER="Accept-Encoding: gzip" # measure() sends it with every request
names=()
echo "compression: ${size}-byte JSON, wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s -H 'Accept-Encoding: gzip', $ROUNDS interleaved rounds, $WORKERS workers each, $(nproc) cores"
for level in $LEVELS; do
  trafik_port=$(free_port)
  nginx_port=$(free_port)
  cat >"$work/trafik-$level.toml" <<CONF
[server]
name = "kenar"
workers = $WORKERS
[[listener]]
name = "kenar"
listen = "127.0.0.1:$trafik_port"
[[listener.route]]
pool = "koken"
[listener.route.compress]
encodings = ["gzip"]
types = ["application/json"]
min_length = 256
gzip_level = $level
[[pool]]
name = "koken"
backends = [{ address = "127.0.0.1:$origin_port" }]
CONF
  RUST_LOG=warn "$trafik" serve -c "$work/trafik-$level.toml" >/dev/null &
  trafik_pid=$!
  pids+=("$trafik_pid")
  mkdir -p "$work/proxy-$level/logs"
  nginx_conf "$work/proxy-$level" "$nginx_port" "location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      gzip on;
      gzip_comp_level $level;
      gzip_types application/json;
      gzip_min_length 256;
      gzip_proxied any;
      gzip_vary on;
    }" "$WORKERS"
  nginx -p "$work/proxy-$level" -c "$work/proxy-$level/nginx.conf" 2>"$work/proxy-$level/stderr" &
  nginx_pid=$!
  pids+=("$nginx_pid")
  for port in "$trafik_port" "$nginx_port"; do wait_for_port "$port"; done
  for port in "$trafik_port" "$nginx_port"; do
    curl -s -H 'Accept-Encoding: gzip' "http://127.0.0.1:$port/veri.json" >"$work/gz-$port"
    cmp -s <(gzip -dc "$work/gz-$port") "$work/site/veri.json" || { echo "port $port: not the file in gzip" >&2; exit 1; }
  done
  trafik_size=$(stat -c %s "$work/gz-$trafik_port")
  nginx_size=$(stat -c %s "$work/gz-$nginx_port")
  names+=("trafik gzip-$level" "nginx gzip-$level")
  for _ in $(seq "$ROUNDS"); do
    measure "trafik gzip-$level" "$trafik_port" "$trafik_pid" /veri.json
    measure "nginx gzip-$level" "$nginx_port" "$nginx_pid" /veri.json
  done
  SIZES[$level]="$trafik_size $nginx_size"
done
report "${names[@]}"
echo
for level in $LEVELS; do
  read -r trafik_size nginx_size <<<"${SIZES[$level]}"
  trafik_cpu=$(median "${CPU[trafik gzip-$level]}")
  nginx_cpu=$(median "${CPU[nginx gzip-$level]}")
  printf 'gzip level %s: trafik %s bytes (%s ns CPU per input byte), nginx %s bytes (%s ns); trafik/nginx CPU per compressed byte %s×\n' \
    "$level" "$trafik_size" "$(awk -v c="$trafik_cpu" -v s="$size" 'BEGIN { printf "%.2f", c * 1000 / s }')" \
    "$nginx_size" "$(awk -v c="$nginx_cpu" -v s="$size" 'BEGIN { printf "%.2f", c * 1000 / s }')" \
    "$(ratio "$trafik_cpu" "$nginx_cpu")"
done
echo "goal: CPU per compressed byte ≤ 1.0× nginx"
