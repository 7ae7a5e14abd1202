#!/usr/bin/env bash
# Builds trafik's release binary with profile-guided optimization (PGO) and prints its path.
#
# An instrumented build serves the proxy's everyday loads for about half a minute, the backends
# being nginx: h2load over h2c to an h2c pool and to an HTTP/1.1 pool; wrk over HTTP/1.1 to an
# HTTP/1.1 pool and through an edge cache; HTTPS (the demo certificate of examples/certs) with
# wrk over HTTP/1.1, kept alive and a handshake a request, and h2load over HTTP/2. LLVM merges the counts, and the release build is
# then compiled with them: hot paths laid out together and inlined along the way a request
# takes, cold ones (errors, reloads, the admin API) moved aside. A path the training does not
# run is compiled as cold: add a load here before measuring one.
# On the 2-core bench machine this cut trafik's user-space CPU a proxied HTTP/2 request by about
# a quarter (README, "Benchmarks"). The profile is made fresh from this checkout every run, so it
# never describes other code.
#
#   scripts/pgo-build.sh                 # prints TARGET_DIR/pgo/release/trafik
#   TRAFIK=$(scripts/pgo-build.sh | tail -n 1) bench/h2-upstream.sh
#   PGO=1 bench/h2-upstream.sh           # the same: lib.sh builds this way when PGO=1
#
# The two builds are full ones in their own target directories (TARGET_DIR/pgo-train and
# TARGET_DIR/pgo), so they leave the ordinary release build alone; each takes as long as a
# release build. Needs rustup's llvm-tools (added here), nginx, h2load (nghttp2-client) and wrk.
# Every process it starts is stopped by its PID.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in nginx h2load wrk rustup; do
  command -v "$tool" >/dev/null || { echo "scripts/pgo-build.sh needs $tool (apt-get install nginx nghttp2-client wrk)" >&2; exit 2; }
done
rustup component add llvm-tools >/dev/null 2>&1 || {
  echo "scripts/pgo-build.sh needs rustup's llvm-tools: rustup component add llvm-tools" >&2
  exit 2
}
profdata="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"

target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
profiles="$target_dir/pgo-profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

echo "building the instrumented binary" >&2
CARGO_TARGET_DIR="$target_dir/pgo-train" RUSTFLAGS="-Cprofile-generate=$profiles/build" \
  cargo build --release -q -p trafik --manifest-path "$root/Cargo.toml"

# The training run: lib.sh starts, remembers and stops the processes; the instrumented trafik
# writes its counts when it exits, so it is stopped here with SIGTERM and waited for.
TRAFIK="$target_dir/pgo-train/release/trafik" source "$root/bench/lib.sh"
WORKERS=1
H2_BACKEND=$(free_port)
H1_BACKEND=$(free_port)
nginx_conf "$work/h2-backend" "server { listen 127.0.0.1:$H2_BACKEND http2; location / { return 200 \"kargo\\n\"; } }"
nginx -p "$work/h2-backend" -c "$work/h2-backend/nginx.conf" 2>"$work/h2-backend/stderr" &
pids+=($!)
nginx_conf "$work/h1-backend" "server { listen 127.0.0.1:$H1_BACKEND; location / { return 200 \"kargo\\n\"; } }"
nginx -p "$work/h1-backend" -c "$work/h1-backend/nginx.conf" 2>"$work/h1-backend/stderr" &
pids+=($!)
wait_for_port "$H2_BACKEND"
wait_for_port "$H1_BACKEND"

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

echo "training: h2 → h2c, h2 → HTTP/1.1, HTTP/1.1 → HTTP/1.1, the cache, HTTPS, handshakes" >&2
h2load -n 200000 -c 16 -m 10 "http://127.0.0.1:$H2_TO_H2/takip" >/dev/null
h2load -n 100000 -c 16 -m 10 "http://127.0.0.1:$H2_TO_H1/takip" >/dev/null
wrk -t 2 -c 64 -d 5s "http://127.0.0.1:$H1_TO_H1/takip" >/dev/null
wrk -t 2 -c 64 -d 3s "http://127.0.0.1:$CACHED/takip" >/dev/null
wrk -t 2 -c 64 -d 3s "https://127.0.0.1:$HTTPS/takip" >/dev/null
wrk -t 2 -c 64 -d 2s -H "Connection: close" "https://127.0.0.1:$HTTPS/takip" >/dev/null
h2load -n 50000 -c 16 -m 10 "https://127.0.0.1:$HTTPS/takip" >/dev/null
kill -TERM "$trafik_pid"
wait "$trafik_pid" || true
compgen -G "$profiles/trafik-*.profraw" >/dev/null || { echo "the instrumented trafik wrote no profile (see $work/trafik.log)" >&2; exit 1; }
"$profdata" merge -o "$profiles/trafik.profdata" "$profiles"/trafik-*.profraw

echo "building with the profile" >&2
CARGO_TARGET_DIR="$target_dir/pgo" RUSTFLAGS="-Cprofile-use=$profiles/trafik.profdata" \
  cargo build --release -q -p trafik --manifest-path "$root/Cargo.toml"
echo "$target_dir/pgo/release/trafik"
