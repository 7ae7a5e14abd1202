#!/usr/bin/env bash
# Instructions per proxied request, counted by valgrind's callgrind: a figure that does not move
# with the machine's noise, for comparing two builds of trafik's hot path.
#
# Runs `trafik proxy` (one worker) under callgrind in front of one `trafik upstream`, sends
# REQUESTS requests over 8 kept-alive connections with wrk, and prints user-space instructions
# per request: (instructions of the loaded run − instructions of an idle run) / requests.
#
#   bench/callgrind.sh                          # this checkout's release build
#   bench/callgrind.sh OLD_BINARY NEW_BINARY    # compare builds, side by side
#   ENGINES="trafik hyper" bench/callgrind.sh    # this build on each HTTP/1 engine
#   MODE=tcp bench/callgrind.sh OLD NEW         # layer 4: instructions per new connection
#                                               # (`proxy --mode tcp`, wrk with Connection: close)
#   MODE=cache bench/callgrind.sh OLD NEW       # instructions per cache hit (`serve`, one route
#                                               # behind a `[[cache]]`, warmed by one request)
#   KEEP=DIR bench/callgrind.sh                 # keeps each loaded run's callgrind.out in DIR
#                                               # (for callgrind_annotate)
#   MODE=jwt-local bench/callgrind.sh OLD NEW   # instructions per request on a route with JWT
#                                               # (HS256, one forwarded claim) and a local rate
#                                               # limit, as bench/gateway-filters.sh's; note that
#                                               # valgrind hides the CPU's SHA extensions, so
#                                               # SHA-256 counts ~10,000 of them here
#   MODE=static bench/callgrind.sh OLD NEW      # instructions per request for a 4 KB static file
#
# Needs: valgrind wrk (apt-get install valgrind wrk) and cargo.
set -euo pipefail

SECONDS_LOADED=${SECONDS_LOADED:-8}

for tool in valgrind wrk python3; do
  command -v "$tool" >/dev/null || { echo "bench/callgrind.sh needs $tool (apt-get install valgrind wrk python3)" >&2; exit 2; }
done
# Builds given: the first plays the upstream too, and nothing is built.
[[ $# -gt 0 && -z ${TRAFIK:-} ]] && TRAFIK=$1
source "$(dirname "$0")/lib.sh"
binaries=("$@")
((${#binaries[@]})) || binaries=("$trafik")

BASE_PORT=${BASE_PORT:-$(free_block 3)}
UPSTREAM_PORT=$BASE_PORT
PROXY_PORT=$((BASE_PORT + 1))
ADMIN_PORT=$((BASE_PORT + 2))
RUST_LOG=warn "$trafik" upstream --name k1 --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null &
pids+=($!)
wait_for_port "$UPSTREAM_PORT"

# Total instructions of one run of BINARY: idle (no requests) or loaded.
MODE=${MODE:-http}
case $MODE in
  http) mode=() headers=() ;;
  tcp) mode=(--mode tcp --retries 0) headers=(-H "Connection: close") ;;
  jwt-local)
    # The route and token of bench/gateway-filters.sh's JWT + local limit.
    secret=trafik-ornek-anahtar
    headers=(-H "Authorization: Bearer $(bearer_token "$secret")")
    route=$(printf '[listener.route.jwt]\nalgorithm = "HS256"\nsecret = "%s"\nissuer = "trafik-ornek"\nforward_claims = ["sub: x-kullanici"]\n[listener.route.rate_limit]\nrate = 100000000\nburst = 100000000\nkey = "client-ip"' "$secret")
    ;;
  static) headers=()
    # The course's 4 KB logo under the path wrk asks for.
    mkdir -p "$work/takip"
    head -c 4000 /dev/zero | tr '\0' x >"$work/takip/TR-4821"
    target=$(printf 'path_prefix = "/takip"\nstatic = "%s"' "$work/takip")
    ;;
  cache) headers=()
    route='cache = "edge"'
    cache=$'[[cache]]\nname = "edge"\ndefault_ttl = "1h"'
    ;;
  *) echo "MODE is http, tcp, cache, jwt-local or static, not $MODE" >&2; exit 2 ;;
esac
# cache, jwt-local and static serve one route from a configuration file.
target=${target:-'pool = "origin"'}
cat >"$work/config.toml" <<CONF
[server]
workers = 1
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[[listener]]
name = "edge"
listen = "127.0.0.1:$PROXY_PORT"
[[listener.route]]
$target
${route:-}
[[pool]]
name = "origin"
backends = [{ address = "127.0.0.1:$UPSTREAM_PORT" }]
${cache:-}
CONF

measure() { # binary idle|loaded [engine]
  local binary=$1 load=$2 out="$work/callgrind.$RANDOM" engine=()
  [[ -n ${3:-} ]] && engine=(--engine "$3")
  local run=(proxy "${mode[@]}" --listen "127.0.0.1:$PROXY_PORT" --to "127.0.0.1:$UPSTREAM_PORT"
    --workers 1 "${engine[@]}" --admin "127.0.0.1:$ADMIN_PORT")
  if [[ $MODE == cache || $MODE == jwt-local || $MODE == static ]]; then
    sed "s/^workers = 1$/workers = 1${3:+\\nengine = \"$3\"}/" "$work/config.toml" >"$work/run.toml"
    run=(serve -c "$work/run.toml")
  fi
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out" "$binary" "${run[@]}" \
    >/dev/null 2>"$work/valgrind.log" &
  local pid=$!
  for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT") 2>/dev/null && break; sleep 0.05; done
  local requests=0
  if [[ $load == loaded && $MODE != http ]]; then
    # tcp: every request is a new connection through the proxy, wrk's count is the
    # connections'. cache: one request warms the store, wrk's are hits. jwt-local: every
    # request carries the token. static: every request is the file's.
    [[ $MODE == cache ]] && (exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT"
      printf 'GET /takip/TR-4821 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; cat <&3 >/dev/null)
    requests=$(wrk -t1 -c8 -d"${SECONDS_LOADED}s" "${headers[@]}" "http://127.0.0.1:$PROXY_PORT/takip/TR-4821" |
      awk '/requests in/ {print $1}')
  elif [[ $load == loaded ]]; then
    wrk -t1 -c8 -d"${SECONDS_LOADED}s" "http://127.0.0.1:$PROXY_PORT/takip/TR-4821" >/dev/null
    # From /metrics: /status has other "requests" (the last seconds) before the backend's total.
    requests=$(exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT"; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3 |
      grep '^trafik_backend_requests_total' | head -1 | awk '{print $2}')
  fi
  kill -TERM "$pid"; wait "$pid" || true
  local total
  total=$(grep -m1 '^summary:' "$out" | awk '{print $2}')
  [[ $load == loaded && -n ${KEEP:-} ]] && cp "$out" "$KEEP/callgrind.$(basename "$binary")${3:+.$3}.out"
  echo "$total $requests"
}

printf '%-60s %12s %14s\n' binary "$([[ $MODE == tcp ]] && echo connections || echo requests)" "instr/$([[ $MODE == tcp ]] && echo connection || echo request)"
read -r -a engines <<<"${ENGINES:-}"
((${#engines[@]})) || engines=("")
for binary in "${binaries[@]}"; do
  for engine in "${engines[@]}"; do
    read -r idle _ < <(measure "$binary" idle "$engine")
    read -r loaded requests < <(measure "$binary" loaded "$engine")
    printf '%-60s %12s %14.0f\n' "$binary${engine:+ ($engine)}" "$requests" "$(echo "($loaded - $idle) / $requests" | bc -l)"
  done
done
