# Shared by the bench scripts: build trafik, remember the processes a script starts and stop
# them (by PID) on exit, wait for a port. Source it; it sets $root, $trafik and $work.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cargo build --release -q -p trafik --manifest-path "$root/Cargo.toml"
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
trafik="$target_dir/release/trafik"
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
