#!/usr/bin/env bash
# Instructions per proxied HTTP/2 request, counted by valgrind's callgrind: the h2 → h2 path of
# bench/h2-upstream.sh (h2load, prior-knowledge h2c → trafik → an h2c backend, pool protocol
# "h2c"), as a figure that does not move with the machine's noise.
#
# Runs `trafik serve` (one worker) under callgrind in front of nginx answering a fixed 6 bytes
# over h2c, sends REQUESTS requests with h2load (CLIENTS connections, STREAMS streams each),
# and prints user-space instructions per request: (instructions of the loaded run − those of
# an idle run) / requests. Each run ends when h2load has sent its requests (or after
# TIME_LIMIT seconds); every process it starts is stopped by its PID.
#
#   bench/callgrind-h2.sh                          # this checkout's release build
#   bench/callgrind-h2.sh OLD_BINARY NEW_BINARY    # compare builds, side by side
#   KEEP=dir bench/callgrind-h2.sh BINARY          # also keep the loaded run's callgrind.out
#                                                  # (a --profile profiling build has line data)
#   UPSTREAM=http1 bench/callgrind-h2.sh OLD NEW   # h2 at the edge, HTTP/1.1 to the backend
#                                                  # (pool protocol "http1", nginx without h2):
#                                                  # the pipeline's path for every HTTP/2 client
#   PEERS= bench/callgrind-h2.sh                   # trafik only
#
# After the builds the peers in PEERS run the same load under callgrind, one thread each:
# `haproxy` as configured by default (it adds no fields to a request), `haproxy+fwd` adding the
# five trafik adds by default (lib.sh's HAPROXY_FORWARDING): the same work.
#
# Needs: valgrind, h2load (nghttp2-client), nginx, haproxy (unless PEERS is empty; Debian
# packages) and cargo.
set -euo pipefail

REQUESTS=${REQUESTS:-20000}
CLIENTS=${CLIENTS:-16}
STREAMS=${STREAMS:-10}
TIME_LIMIT=${TIME_LIMIT:-300}
PEERS=${PEERS-haproxy haproxy+fwd}
UPSTREAM=${UPSTREAM:-h2c}
case $UPSTREAM in
  h2c) backend_listen=http2 server_proto="proto h2" ;;
  http1) backend_listen= server_proto= ;;
  *) echo "UPSTREAM is h2c or http1, not $UPSTREAM" >&2; exit 2 ;;
esac

for tool in valgrind h2load nginx ${PEERS:+haproxy}; do
  command -v "$tool" >/dev/null || { echo "bench/callgrind-h2.sh needs $tool (apt-get install valgrind nghttp2-client nginx haproxy)" >&2; exit 2; }
done
# Builds given: the first plays the upstream too, and nothing is built.
[[ $# -gt 0 && -z ${TRAFIK:-} ]] && TRAFIK=$1
source "$(dirname "$0")/lib.sh"
binaries=("$@")
((${#binaries[@]})) || binaries=("$trafik")

BACKEND_PORT=$(free_port)
PROXY_PORT=$(free_port)

# One worker each: trafik's instructions are counted, nginx only answers.
WORKERS=1
start_nginx_backend "$BACKEND_PORT" "$backend_listen"

h2c_pool_config "$work/trafik.toml" "$PROXY_PORT" "$BACKEND_PORT" "$UPSTREAM"

# The configuration of each peer, written now and started under callgrind in `measure`.
for peer in $PEERS; do
  case $peer in
    haproxy) rules= ;;
    haproxy+fwd) rules=$HAPROXY_FORWARDING ;;
    *) echo "PEERS holds haproxy and haproxy+fwd, not $peer" >&2; exit 2 ;;
  esac
  haproxy_http_config "$work/$peer.cfg" 1 "$PROXY_PORT" "$BACKEND_PORT" "proto h2" "$server_proto" "$rules"
done

# Total instructions of one run of TARGET (a trafik build or a peer): idle (no requests) or
# loaded; KEEP keeps the loaded run's profile.
measure() { # target idle|loaded
  local target=$1 load=$2 out="$work/callgrind.$RANDOM" command
  case $target in
    haproxy*) command=(haproxy -db -f "$work/$target.cfg") ;;
    *) command=("$target" serve --config "$work/trafik.toml") ;;
  esac
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out" "${command[@]}" \
    >/dev/null 2>"$work/valgrind.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT") 2>/dev/null && break; sleep 0.05; done
  if [[ $load == loaded ]]; then
    local answer
    answer=$(timeout "$TIME_LIMIT" h2load -n "$REQUESTS" -c "$CLIENTS" -m "$STREAMS" \
      "http://127.0.0.1:$PROXY_PORT/takip" || true)
    local ok
    ok=$(awk '/^status codes:/ {print $3}' <<<"$answer")
    [[ $ok == "$REQUESTS" ]] || echo "warning: $(grep -E '^(requests|status codes):' <<<"$answer" | tr '\n' ' ')" >&2
  fi
  kill -TERM "$pid"; wait "$pid" || true
  if [[ $load == loaded && -n ${KEEP:-} ]]; then
    mkdir -p "$KEEP"
    cp "$out" "$KEEP/callgrind.out.$(basename "$target").$$"
    echo "kept $KEEP/callgrind.out.$(basename "$target").$$" >&2
  fi
  grep -m1 '^summary:' "$out" | awk '{print $2}'
}

printf '%-60s %12s %14s\n' target requests instr/request
for target in "${binaries[@]}" $PEERS; do
  idle=$(measure "$target" idle)
  loaded=$(measure "$target" loaded)
  printf '%-60s %12s %14.0f\n' "$target" "$REQUESTS" "$(echo "($loaded - $idle) / $REQUESTS" | bc -l)"
done
