#!/usr/bin/env bash
# Builds trafik's release binary with profile-guided optimization (PGO) and prints its path.
#
# An instrumented build serves the proxy's everyday loads for about half a minute, the backends
# being nginx: h2load over h2c to an h2c pool and to an HTTP/1.1 pool; wrk over HTTP/1.1 to an
# HTTP/1.1 pool and through an edge cache; HTTPS (the demo certificate of examples/certs) with
# wrk over HTTP/1.1, kept alive and a handshake a request, and h2load over HTTP/2. A load that
# is not answered in full fails the build. LLVM merges the counts, and the release build is then
# compiled with them: hot paths laid out together and inlined along the way a request takes,
# cold ones (errors, reloads, the admin API) moved aside. A path the training does not run
# (HTTP/3, layer 4, the gateway's filters, static files, compression) is compiled as cold: add a
# load here before measuring one. On the 2-core bench machine this cut trafik's user-space CPU a
# proxied HTTP/2 request by about a quarter (README, "Benchmarks"). The profile is made fresh
# from this checkout every run, so it never describes other code.
#
#   scripts/pgo-build.sh                 # prints TARGET_DIR/pgo/release/trafik
#   TRAFIK=$(scripts/pgo-build.sh | tail -n 1) bench/h2-upstream.sh
#   PGO=1 bench/h2-upstream.sh           # the same: lib.sh builds this way when PGO=1
#
# The two builds have their own target directories (TARGET_DIR/pgo-train and TARGET_DIR/pgo), so
# they leave the ordinary release build alone. The first run takes two full release builds
# (about 15 minutes on a 2-core machine); later ones reuse the instrumented build while the code
# is unchanged, but the profile is new every run, so the last build is always a full one: build
# once and pass the path (TRAFIK=) to several benches. Needs the toolchain's llvm-profdata
# (rustup's llvm-tools, added here when missing), nginx, h2load (nghttp2-client), wrk and flock.
# Every process it starts is stopped by its PID.
set -euo pipefail

# Only the binary's path goes to standard output (lib.sh reads its last line); everything else,
# the processes started here included, writes to standard error.
exec 3>&1 1>&2

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# From the checkout, so rustc and cargo are the toolchain it builds with.
cd "$root"
for tool in nginx h2load wrk flock; do
  command -v "$tool" >/dev/null || { echo "scripts/pgo-build.sh needs $tool (apt-get install nginx nghttp2-client wrk util-linux)"; exit 2; }
done
if [[ -n ${CARGO_ENCODED_RUSTFLAGS:-} ]]; then
  echo "scripts/pgo-build.sh adds its flags to RUSTFLAGS, which cargo ignores while CARGO_ENCODED_RUSTFLAGS is set: unset it"
  exit 2
fi
rustc=${RUSTC:-rustc}
profdata="$("$rustc" --print sysroot)/lib/rustlib/$("$rustc" -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
if [[ ! -x $profdata ]]; then
  rustup component add llvm-tools || { echo "scripts/pgo-build.sh needs the toolchain's llvm-profdata: rustup component add llvm-tools"; exit 2; }
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
mkdir -p "$target_dir"
# One run at a time: a second would empty the first's profiles and share its target directories.
exec 9>"$target_dir/pgo.lock"
flock 9
profiles="$target_dir/pgo-profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

# Added to the RUSTFLAGS given, so the PGO build differs from the plain one only by its profile.
echo "building the instrumented binary"
CARGO_TARGET_DIR="$target_dir/pgo-train" RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Cprofile-generate=$profiles/build" \
  cargo build --release -q -p trafik

# The training run: lib.sh starts, remembers and stops the processes; the instrumented trafik
# writes its counts when it exits, so it is stopped here with SIGTERM and waited for.
TRAFIK="$target_dir/pgo-train/release/trafik" source "$root/bench/lib.sh"
H2_BACKEND=$(free_port)
H1_BACKEND=$(free_port)
start_nginx_backend "$H2_BACKEND" http2
start_nginx_backend "$H1_BACKEND"

WORKERS=2
H2_TO_H2=$(free_port)
H2_TO_H1=$(free_port)
H1_TO_H1=$(free_port)
CACHED=$(free_port)
HTTPS=$(free_port)
h2c_pool_config "$work/trafik.toml" "$H2_TO_H2" "$H2_BACKEND"
cat >>"$work/trafik.toml" <<CONF

[[listener]]
name = "h2-to-h1"
listen = "127.0.0.1:$H2_TO_H1"

[[listener.route]]
pool = "plain"

[[listener]]
name = "h1"
listen = "127.0.0.1:$H1_TO_H1"

[[listener.route]]
pool = "plain"

[[listener]]
name = "cached"
listen = "127.0.0.1:$CACHED"

[[listener.route]]
pool = "plain"
cache = "edge"

[[listener]]
name = "https"
listen = "127.0.0.1:$HTTPS"
protocol = "https"

[[listener.tls]]
cert = "$root/examples/certs/localhost.pem"
key = "$root/examples/certs/localhost.key"

[[listener.route]]
pool = "plain"

[[cache]]
name = "edge"
default_ttl = "1h"

[[pool]]
name = "plain"
protocol = "http1"
backends = [{ address = "127.0.0.1:$H1_BACKEND" }]
CONF
LLVM_PROFILE_FILE="$profiles/trafik-%p-%m.profraw" RUST_LOG=warn "$trafik" serve --config "$work/trafik.toml" >"$work/trafik.log" 2>&1 &
trafik_pid=$!
pids+=($trafik_pid)
for port in $H2_TO_H2 $H2_TO_H1 $H1_TO_H1 $CACHED $HTTPS; do wait_for_port "$port"; done

# A load that failed would train trafik's error paths: every request must have been answered.
h2load_whole() { # url requests
  local out
  out=$(h2load -n "$2" -c 16 -m 10 "$1")
  grep -q "requests: $2 total, $2 started, $2 done, $2 succeeded, 0 failed, 0 errored" <<<"$out" \
    || { echo "training load to $1 failed:"; grep -E "^requests:|^status codes:" <<<"$out"; exit 1; }
}
wrk_whole() { # wrk arguments...
  local out
  out=$(wrk -t 2 -c 64 "$@")
  ! grep -q "Non-2xx" <<<"$out" || { echo "training load wrk $* failed:"; grep "Non-2xx" <<<"$out"; exit 1; }
}
echo "training: h2 → h2c, h2 → HTTP/1.1, HTTP/1.1 → HTTP/1.1, the cache, HTTPS, handshakes"
h2load_whole "http://127.0.0.1:$H2_TO_H2/takip" 200000
h2load_whole "http://127.0.0.1:$H2_TO_H1/takip" 100000
wrk_whole -d 5s "http://127.0.0.1:$H1_TO_H1/takip"
wrk_whole -d 3s "http://127.0.0.1:$CACHED/takip"
wrk_whole -d 3s "https://127.0.0.1:$HTTPS/takip"
wrk_whole -d 2s -H "Connection: close" "https://127.0.0.1:$HTTPS/takip"
h2load_whole "https://127.0.0.1:$HTTPS/takip" 50000
kill -TERM "$trafik_pid"
wait "$trafik_pid" || true
# Waited for: lib.sh's cleanup must not signal its PID, which may be another process's by then.
others=()
for pid in "${pids[@]}"; do [[ $pid == "$trafik_pid" ]] || others+=("$pid"); done
pids=("${others[@]}")
if ! compgen -G "$profiles/trafik-*.profraw" >/dev/null; then
  echo "the instrumented trafik wrote no profile; its log:"
  tail -n 20 "$work/trafik.log"
  exit 1
fi
"$profdata" merge -o "$profiles/trafik.profdata" "$profiles"/trafik-*.profraw

echo "building with the profile"
CARGO_TARGET_DIR="$target_dir/pgo" RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Cprofile-use=$profiles/trafik.profdata" \
  cargo build --release -q -p trafik
echo "$target_dir/pgo/release/trafik" >&3
