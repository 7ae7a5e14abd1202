#!/usr/bin/env bash
# Runs every fuzz target for CASES cases each, nice'd, in the background: the request heads
# through a real proxy, the config loader, the admin API, ClientHello sniffing, DNS over UDP and
# TCP, and the load client's response parser (each a seeded mutation loop on stable Rust; see
# README "Fuzzing"). Each target logs to LOGS/TARGET.log its cases, seed and time, or the input
# that failed; `fuzz/run.sh` prints where and returns at once, `fuzz/run.sh --wait` waits and
# prints the summary. Usage: fuzz/run.sh [CASES] [--wait]   (default 100000; LOGS defaults to
# /tmp/trafik-fuzz, TRAFIK_FUZZ_SEED fixes the seed, else each run takes one from the clock;
# TARGETS="admin dns" runs only those).
set -euo pipefail
cases=${1:-100000}
wait_for_all=false
[[ ${2:-} == --wait || ${1:-} == --wait ]] && wait_for_all=true
[[ $cases == --wait ]] && cases=100000
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
logs=${LOGS:-/tmp/trafik-fuzz}
mkdir -p "$logs"
cd "$root"
# Build once, in the foreground, and run the test executables themselves: a later edit of the
# sources does not make a running target rebuild.
binary() { # the test target's name, then cargo test arguments selecting it
  local name=$1
  shift
  nice cargo test -q "$@" --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    artifact = json.loads(line)
    if artifact.get("profile", {}).get("test") and artifact["target"]["name"] == sys.argv[1]:
        print(artifact["executable"])' "$name" | tail -1
}
heads=$(binary fuzz_heads -p trafik-proxy --test fuzz_heads)
engines=$(binary engine_differential -p trafik-proxy --test engine_differential)
network=$(binary fuzz -p trafik --test fuzz)
config=$(binary trafik -p trafik --bin trafik)

# target name, executable, the long test's name.
targets=(
  "heads $heads mutated_request_heads_long_run"
  "config $config mutated_configs_long_run"
  "admin $network long_admin"
  "client-hello $network long_client_hello"
  "dns $network long_dns"
  "load-client $network long_load_client"
  "engine $engines engine_differential_long_run"
)
pids=()
for entry in "${targets[@]}"; do
  read -r name executable test <<<"$entry"
  [[ -n ${TARGETS:-} && " $TARGETS " != *" $name "* ]] && continue
  log="$logs/$name.log"
  {
    echo "started $(date -u +%FT%TZ), $cases cases"
    start=$(date +%s)
    if TRAFIK_FUZZ_CASES=$cases nice "$executable" "$test" --ignored --nocapture --test-threads 1 2>&1; then
      echo "passed in $(($(date +%s) - start)) s"
    else
      echo "FAILED after $(($(date +%s) - start)) s"
    fi
  } >"$log" 2>&1 &
  pids+=($!)
  echo "$name: $log (pid $!)"
done

if $wait_for_all; then
  wait "${pids[@]}" || true
  echo
  for entry in "${targets[@]}"; do
    name=${entry%% *}
    [[ -n ${TARGETS:-} && " $TARGETS " != *" $name "* ]] && continue
    printf '%-13s %s | %s\n' "$name" "$(grep -hE 'cases|heads|mutated' "$logs/$name.log" | grep -E '[0-9]+ ' | tail -1)" \
      "$(tail -1 "$logs/$name.log")"
  done
fi
