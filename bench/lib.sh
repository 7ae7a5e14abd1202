# Shared by the bench scripts: build trafik, remember the processes a script starts and stop
# them (by PID) on exit, wait for a port. Source it; it sets $root, $trafik and $work.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# TRAFIK=path/to/trafik runs that binary instead of building the release one.
if [[ -n ${TRAFIK:-} ]]; then
  trafik=$TRAFIK
else
  cargo build --release -q -p trafik --manifest-path "$root/Cargo.toml"
  target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  trafik="$target_dir/release/trafik"
fi
work=$(mktemp -d /tmp/trafik-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

wait_for_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

# CPU ticks (utime+stime) of a process and all its descendants.
ticks() {
  local total=0 pid
  for pid in $1 $(pgrep -P "$1" || true); do
    if [[ -r /proc/$pid/stat ]]; then
      # Fields after the command name (which may hold spaces): utime is 14th, stime 15th overall.
      read -r -a f < <(sed 's/^.*) //' "/proc/$pid/stat")
      total=$((total + f[11] + f[12]))
    fi
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)

to_ms() { # wrk prints 512.00us, 1.23ms or 1.05s
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

# The median of a space-separated list of numbers ("-" when there are none).
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)] }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
