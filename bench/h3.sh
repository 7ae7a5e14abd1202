#!/usr/bin/env bash
# HTTP/3 against HTTPS through the same trafik process, on loopback, to the same `trafik upstream`
# replica: an https listener and an h3 listener on one port (its certificate and routes), 8
# connections of each kind sending 500 GETs each one after the other (HTTP/1.1 kept alive over
# TLS; HTTP/3 one stream at a time), in 5 interleaved rounds; prints the median req/s of each
# and their ratio. No peer here speaks HTTP/3 with a load tool in Debian (curl, h2load and wrk
# have no HTTP/3 in their Debian builds), so the clients are the test's own: rustls + hyper for
# HTTPS, quinn + h3 for HTTP/3, in one process, in the release build.
#
#   bench/h3.sh
#
# Needs: cargo. The test starts and stops its own processes (by their ids).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p trafik --test h3 -- --ignored --nocapture bench_h3_against_https 2>&1 |
  grep -E '^h3 |test result'
