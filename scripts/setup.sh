#!/usr/bin/env bash
# Installs what trafik's build and tests need and this machine lacks (Debian packages with apt-get,
# Python packages with pip), and says so; with nothing missing it does nothing. Run by
# scripts/test.sh (the README's test command) and .ci/run. Without root, it prints the command to
# run instead of failing halfway.
set -euo pipefail

# The tests run the real binary and signal it with kill(1) from procps; the README's command is
# tested in a network namespace of its own (unshare from util-linux, ip from iproute2); a C
# compiler and pkg-config are there for crates with build scripts.
need=()
need_python=()
command -v kill >/dev/null || need+=(procps)
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v cc >/dev/null || need+=(build-essential)
command -v pkg-config >/dev/null || need+=(pkg-config)
# The TLS tests also drive trafik with curl (HTTP/2 over TLS); they skip that part without it.
command -v curl >/dev/null || need+=(curl)
# The DNS tests ask trafik's name server with dig.
command -v dig >/dev/null || need+=(dnsutils)
# The DNSSEC test validates trafik's signed answers with delv (bind9-dnsutils; dnsutils is its
# transitional name, but an older or trimmed install may have dig without delv).
command -v delv >/dev/null || need+=(bind9-dnsutils)
# The signed transfer test checks the transferred zone with ldns-verify-zone (ldnsutils).
command -v ldns-verify-zone >/dev/null || need+=(ldnsutils)
# The zone transfer tests run BIND's named as a real secondary (in /usr/sbin, outside a
# non-root PATH).
command -v named >/dev/null || [ -x /usr/sbin/named ] || need+=(bind9)
command -v redis-server >/dev/null || need+=(redis-server)
# The dashboard's browser test drives Debian's chromium through chromedriver (WebDriver).
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v etcd >/dev/null || need+=(etcd-server)
# The ACME tests order certificates from pebble, Let's Encrypt's test CA.
command -v pebble >/dev/null || need+=(pebble)
# The GeoIP tests write MaxMind databases with the mmdb-writer Python package.
python3 -c 'import mmdb_writer' 2>/dev/null || need_python+=(mmdb-writer)
# The gRPC tests run a Python grpcio server and client through trafik.
python3 -c 'import grpc' 2>/dev/null || need_python+=(grpcio)
sudo=()
if ((${#need[@]} + ${#need_python[@]})) && [[ $(id -u) != 0 ]]; then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "scripts/setup.sh: the tests need these, and installing them needs root:" >&2
    ((${#need[@]})) && echo "  apt-get install ${need[*]}" >&2
    ((${#need_python[@]})) && echo "  pip3 install ${need_python[*]}" >&2
    exit 1
  fi
fi
if ((${#need[@]})); then
  echo "scripts/setup.sh: installing ${need[*]}" >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
if ((${#need_python[@]})); then
  echo "scripts/setup.sh: installing ${need_python[*]} (pip)" >&2
  command -v pip3 >/dev/null || { "${sudo[@]}" apt-get update -qq; "${sudo[@]}" apt-get install -y -qq python3-pip; }
  "${sudo[@]}" pip3 install -q "${need_python[@]}" || "${sudo[@]}" pip3 install -q --break-system-packages "${need_python[@]}"
fi
if command -v rustup >/dev/null; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

