#!/usr/bin/env bash
# trafik (on both HTTP/1 engines) vs nginx vs haproxy as HTTP/1.1 reverse proxies, in one run on
# loopback, for three shapes: `get` (a small GET on kept-alive connections, the ~480-byte answer
# of /takip/TR-4821), `post16k` (16 KiB request bodies to POST /olay) and `close` (a new
# connection per request: `Connection: close`).
#
# Starts one `trafik upstream` replica, then trafik with `engine = "hyper"`, trafik with its own
# engine, nginx and haproxy (Debian packages, in the foreground with generated configs) proxying
# to it, and drives each — and the upstream directly — with the same wrk command, the targets
# interleaved within each round. Prints, per shape, the medians over the rounds of req/s, p50,
# p99 and the proxy's CPU microseconds per request (utime+stime from /proc over the run, all of
# the proxy's processes and threads) with its kernel share, the rest of the machine's CPU per
# request (wrk, the upstream), then each trafik's ratios to nginx and haproxy, with the req/s
# ratio and the CPU ratio it would reach if its user-space work cost nothing (its kernel work
# and the rest stay: lib.sh's `ceiling`). Every process it starts is stopped by its PID on exit.
#
#   bench/proxy.sh                      # 10 s per target, 2 wrk threads, 64 connections
#   DURATION=5 ROUNDS=5 SHAPES="get close" bench/proxy.sh
#
# Needs: wrk nginx haproxy (apt-get install wrk nginx haproxy) and cargo.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
WORKERS=${WORKERS:-2}
SHAPES=${SHAPES:-get post16k close}
PATH_UNDER_TEST=${PATH_UNDER_TEST:-/takip/TR-4821}

for tool in wrk nginx haproxy cargo; do
  command -v "$tool" >/dev/null || { echo "bench/proxy.sh needs $tool (apt-get install wrk nginx haproxy)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
BASE_PORT=${BASE_PORT:-$(free_block 5)}

UPSTREAM_PORT=$BASE_PORT
TRAFIK_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
HAPROXY_PORT=$((BASE_PORT + 3))
TRAFIK_HYPER_PORT=$((BASE_PORT + 4))

# --- the upstream and the three proxies -----------------------------------------------------
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

RUST_LOG=warn "$trafik" proxy --listen "127.0.0.1:$TRAFIK_PORT" --to "127.0.0.1:$UPSTREAM_PORT" \
  --workers "$WORKERS" --engine trafik >/dev/null &
trafik_pid=$!
pids+=("$trafik_pid")
RUST_LOG=warn "$trafik" proxy --listen "127.0.0.1:$TRAFIK_HYPER_PORT" --to "127.0.0.1:$UPSTREAM_PORT" \
  --workers "$WORKERS" --engine hyper >/dev/null &
trafik_hyper_pid=$!
pids+=("$trafik_hyper_pid")

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
  client_body_buffer_size 64k;  # the post16k bodies stay in memory (the workers cannot write $work)
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

start_haproxy_http "$HAPROXY_PORT" "$UPSTREAM_PORT"

for port in "$TRAFIK_PORT" "$TRAFIK_HYPER_PORT" "$NGINX_PORT" "$HAPROXY_PORT"; do wait_for_port "$port"; done

# 16 KiB request bodies, for the post16k shape.
cat >"$work/post16k.lua" <<'LUA'
wrk.method = "POST"
wrk.body = string.rep("x", 16384)
wrk.headers["Content-Type"] = "application/octet-stream"
LUA
# A new connection per request, for the close shape (wrk's -H would need a space in a word).
cat >"$work/close.lua" <<'LUA'
wrk.headers["Connection"] = "close"
LUA

# --- measuring --------------------------------------------------------------------------------
declare -A RPS P50 P99 CPU KERNEL REST BUSY

wrk_args() { # shape port: the wrk arguments after -t/-c/-d
  case $1 in
    get) echo "http://127.0.0.1:$2$PATH_UNDER_TEST" ;;
    post16k) echo "-s $work/post16k.lua http://127.0.0.1:$2/olay" ;;
    close) echo "-s $work/close.lua http://127.0.0.1:$2$PATH_UNDER_TEST" ;;
  esac
}

run() { # shape name port pid-to-charge (empty: none)
  local shape=$1 name=$2 port=$3 pid=${4:-} out key="$1/$2"
  # shellcheck disable=SC2046
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s $(wrk_args "$shape" "$port") >/dev/null # warm-up
  [[ -n $pid ]] && charge_start "$pid"
  # shellcheck disable=SC2046
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency $(wrk_args "$shape" "$port"))
  local rps requests p50 p99 errors
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  [[ -n $pid ]] && charge "$key" "$pid" "$requests"
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $key: $errors" >&2
  RPS[$key]="${RPS[$key]:-} $rps"; P50[$key]="${P50[$key]:-} $p50"; P99[$key]="${P99[$key]:-} $p99"
}

names=(direct trafik-hyper trafik-own nginx haproxy)
echo "trafik bench: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, shapes: $SHAPES; $ROUNDS round(s), $WORKERS proxy workers, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    run "$shape" direct "$UPSTREAM_PORT"
    run "$shape" trafik-hyper "$TRAFIK_HYPER_PORT" "$trafik_hyper_pid"
    run "$shape" trafik-own "$TRAFIK_PORT" "$trafik_pid"
    run "$shape" nginx "$NGINX_PORT" "$nginx_pid"
    run "$shape" haproxy "$HAPROXY_PORT" "$haproxy_pid"
  done
done

for shape in $SHAPES; do
  printf '\n[%s]\n%-13s %12s %9s %9s %11s %8s %10s %6s\n' "$shape" target "req/s" "p50 ms" "p99 ms" "CPU µs/req" kernel "rest µs" busy
  for name in "${names[@]}"; do
    key="$shape/$name"
    printf '%-13s %12s %9s %9s %11s %7s%% %10s %5s%%\n' "$name" "$(median "${RPS[$key]}")" "$(median "${P50[$key]}")" "$(median "${P99[$key]}")" \
      "$(median "${CPU[$key]:-}")" "$(median "${KERNEL[$key]:-}")" "$(median "${REST[$key]:-}")" "$(median "${BUSY[$key]:-}")"
  done
  for engine in trafik-hyper trafik-own; do
    t_rps=$(median "${RPS[$shape/$engine]}"); t_cpu=$(median "${CPU[$shape/$engine]}")
    t_kernel=$(awk -v c="$t_cpu" -v k="$(median "${KERNEL[$shape/$engine]}")" 'BEGIN { printf "%.2f", c * k / 100 }')
    for peer in nginx haproxy; do
      p_cpu=$(median "${CPU[$shape/$peer]}")
      printf '%-13s /%-8s req/s %s× (ceiling %s×)   CPU per request %s× (its kernel part alone %s×)\n' "$engine" "$peer" \
        "$(ratio "$t_rps" "$(median "${RPS[$shape/$peer]}")")" "$(ceiling "$shape/$engine" "$shape/$peer")" \
        "$(ratio "$t_cpu" "$p_cpu")" "$(ratio "$t_kernel" "$p_cpu")"
    done
  done
done
echo
echo "kernel: the proxy's CPU spent in the kernel; rest: what the load generator, the upstream and the"
echo "kernel's other work cost per request; busy: the cores' use. ceiling: the req/s ratio to that peer"
echo "trafik would reach if its user-space work cost nothing (lib.sh's ceiling); its kernel part"
echo "alone: the CPU ratio it would have then."
echo
echo "goal (one-pipeline issue): get ≥ 1.15× nginx req/s at ≤ 0.85× its CPU per request; no shape below 1.0×"
