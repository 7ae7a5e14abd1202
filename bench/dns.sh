#!/usr/bin/env bash
# trafik's authoritative DNS vs PowerDNS (pdns_server with the bind backend), same zone, one run
# on loopback, both started here on free loopback ports and stopped by their PIDs.
#
# dnsperf sends a fixed query mix for DURATION seconds per target and round: A and AAAA of
# static names, a TXT, the apex SOA and NS, and a name that does not exist (NXDOMAIN), to both
# servers. Then trafik's policy names: a geo name asked with an EDNS client subnet option (a
# /24 of group g2) and a weighted name (5/3/2, the next slot of the pattern per query), kinds of
# answer PowerDNS's bind backend has only as LUA records, asked too (LUA=0 skips them): its
# weighted pickwrandom and its country-less geo stand-in, a netmask match on the ECS. Rounds are
# interleaved; medians of queries per second and of the server's CPU microseconds per query
# (utime+stime from /proc, all threads), then each row's ratio to PowerDNS's static answers
# (which come from its packet cache, as trafik's static and geo answers come from its own).
# trafik's zone is signed (online, ECDSA P-256): the static and weighted mixes are asked again
# with the DO bit (trafik-dnssec*), RRSIGs and black-lie NSECs in the answers; without DO its
# answers are unsigned as before. PowerDNS's zone stays unsigned (no DNSSEC database set up).
#
#   bench/dns.sh                      # 5 rounds of 10 s, 2 server threads each
#   ROUNDS=3 DURATION=5 bench/dns.sh
#   TRAFIK=/tmp/trafik-before bench/dns.sh   # another build of trafik against the same peer
#
# Needs: dnsperf pdns-server pdns-backend-bind (apt-get install dnsperf pdns-server
# pdns-backend-bind) and cargo. PowerDNS runs with its defaults (packet cache on) apart from
# the threads: receiver-threads = WORKERS with reuseport, like trafik's WORKERS threads.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
LUA=${LUA:-1}
DURATION=${DURATION:-10}
WORKERS=${WORKERS:-2}
CLIENTS=${CLIENTS:-4}

for tool in dnsperf pdns_server cargo; do
  command -v "$tool" >/dev/null || { echo "bench/dns.sh needs $tool (apt-get install dnsperf pdns-server pdns-backend-bind)" >&2; exit 2; }
done

source "$(dirname "$0")/lib.sh"
trafik=${TRAFIK:-$trafik}

# A port free for both UDP and TCP on loopback.
free_port() {
  python3 - <<'PY'
import socket
while True:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
    port = u.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", port)); print(port); break
    except OSError:
        pass
    finally:
        t.close(); u.close()
PY
}

# --- the zone, as a bind zone file for PowerDNS and as [dns] for trafik ----------------------
cat >"$work/kargo.test.zone" <<'ZONE'
$ORIGIN kargo.test.
$TTL 30
@        IN SOA ns1.kargo.test. hostmaster.kargo.test. 1 3600 600 604800 30
@        IN NS  ns1.kargo.test.
ns1      IN A   127.0.0.1
www      IN A   127.0.0.34
www      IN AAAA ::34
api      IN A   127.0.0.35
bilgi    IN TXT "kargo takip"
agirlik  IN LUA A "pickwrandom({{5,'127.0.0.34'},{3,'127.0.0.35'},{2,'127.0.0.6'}})"
cografi  IN LUA A "netmask({'10.2.0.0/16'}) and '127.0.0.35' or '127.0.0.34'"
ZONE
cat >"$work/named.conf" <<CONF
zone "kargo.test" { type master; file "$work/kargo.test.zone"; };
CONF

pdns_port=$(free_port)
trafik_port=$(free_port)
cat >"$work/trafik.toml" <<TOML
[server]
workers = $WORKERS

[dns]
listen = "127.0.0.1:$trafik_port"

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34"]

[[dns.region]]
name = "b35"
addresses = ["127.0.0.35"]

[[dns.region]]
name = "b06"
addresses = ["127.0.0.6"]

[[dns.group]]
name = "g1"
prefixes = ["10.1.0.0/16"]

[[dns.group]]
name = "g2"
prefixes = ["10.2.0.0/16"]

[[dns.group]]
name = "g3"
prefixes = ["10.3.0.0/16"]

[[dns.group]]
name = "g4"
prefixes = ["10.4.0.0/16"]

[[dns.zone]]
origin = "kargo.test."
ttl = 30
name_servers = ["ns1"]

[dns.zone.dnssec]
keys = "keys/"

[[dns.zone.record]]
name = "ns1"
type = "A"
value = "127.0.0.1"

[[dns.zone.record]]
name = "www"
type = "A"
value = "127.0.0.34"

[[dns.zone.record]]
name = "www"
type = "AAAA"
value = "::34"

[[dns.zone.record]]
name = "api"
type = "A"
value = "127.0.0.35"

[[dns.zone.record]]
name = "bilgi"
type = "TXT"
value = "kargo takip"

[[dns.zone.name]]
name = "cografi"
policy = "geo"
groups = { g1 = "b34", g2 = "b35", g3 = "b34", g4 = "b06" }
fallback = { b34 = "b06", b35 = "b34", b06 = "b35" }

[[dns.zone.name]]
name = "agirlik"
policy = "weighted"
weights = { b34 = 5, b35 = 3, b06 = 2 }
TOML

cat >"$work/static.txt" <<'Q'
www.kargo.test A
www.kargo.test AAAA
api.kargo.test A
ns1.kargo.test A
bilgi.kargo.test TXT
kargo.test SOA
kargo.test NS
yok.kargo.test A
Q
echo "cografi.kargo.test A" >"$work/geo.txt"
echo "agirlik.kargo.test A" >"$work/weighted.txt"
# EDNS client subnet (option 8): IPv4, source /24, scope 0, 10.2.9.0 — group g2.
ecs=8:00011800$(printf '%02x%02x%02x' 10 2 9)

"$trafik" serve -c "$work/trafik.toml" >"$work/trafik.log" 2>&1 &
trafik_pid=$!
pids+=("$trafik_pid")
pdns_server --no-config --daemon=no --guardian=no --disable-syslog --write-pid=no \
  --socket-dir="$work" --local-address=127.0.0.1 --local-port="$pdns_port" \
  --launch=bind --bind-config="$work/named.conf" \
  --receiver-threads="$WORKERS" --reuseport=yes \
  --enable-lua-records=yes --edns-subnet-processing=yes >"$work/pdns.log" 2>&1 &
pdns_pid=$!
pids+=("$pdns_pid")
for port in "$trafik_port" "$pdns_port"; do
  for _ in $(seq 100); do
    dig +short +time=1 +tries=1 @127.0.0.1 -p "$port" kargo.test SOA >/dev/null 2>&1 && break
    sleep 0.1
  done
done
for port in "$trafik_port" "$pdns_port"; do
  answer=$(dig +short @127.0.0.1 -p "$port" www.kargo.test A)
  [[ $answer == 127.0.0.34 ]] || { echo "port $port answered ${answer:-nothing}" >&2; cat "$work"/*.log >&2; exit 1; }
  answer=$(dig +short @127.0.0.1 -p "$port" cografi.kargo.test A +subnet=10.2.9.0/24)
  [[ $answer == 127.0.0.35 ]] || { echo "port $port answered cografi ${answer:-nothing}" >&2; cat "$work"/*.log >&2; exit 1; }
done

declare -A qps cpu
run() { # target port pid queries-file [dnsperf options]
  local target=$1 port=$2 pid=$3 file=$4 before after out rate sent
  shift 4
  before=$(ticks "$pid")
  out=$(dnsperf -s 127.0.0.1 -p "$port" -d "$file" -l "$DURATION" -c "$CLIENTS" -T 2 -q 200 "$@" 2>&1)
  after=$(ticks "$pid")
  rate=$(awk '/Queries per second/ { print $4 }' <<<"$out")
  sent=$(awk '/Queries completed/ { print $3 }' <<<"$out")
  qps[$target]+=" $rate"
  cpu[$target]+=" $(awk -v t=$((after - before)) -v hz="$hz" -v n="$sent" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "-" }')"
}
targets=(trafik powerdns trafik-geo-ecs trafik-weighted trafik-dnssec trafik-dnssec-weighted)
((LUA)) && targets+=(powerdns-lua-geo powerdns-lua-weighted)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  run trafik "$trafik_port" "$trafik_pid" "$work/static.txt"
  run powerdns "$pdns_port" "$pdns_pid" "$work/static.txt"
  run trafik-geo-ecs "$trafik_port" "$trafik_pid" "$work/geo.txt" -E "$ecs"
  run trafik-weighted "$trafik_port" "$trafik_pid" "$work/weighted.txt"
  run trafik-dnssec "$trafik_port" "$trafik_pid" "$work/static.txt" -D
  run trafik-dnssec-weighted "$trafik_port" "$trafik_pid" "$work/weighted.txt" -D
  if ((LUA)); then
    run powerdns-lua-geo "$pdns_port" "$pdns_pid" "$work/geo.txt" -E "$ecs"
    run powerdns-lua-weighted "$pdns_port" "$pdns_pid" "$work/weighted.txt"
  fi
done

printf '%-22s %12s %14s %18s %12s\n' target "queries/s" "CPU µs/query" "q/s ÷ pdns static" "CPU ÷ pdns"
for target in "${targets[@]}"; do
  rate=$(median "${qps[$target]}")
  cost=$(median "${cpu[$target]}")
  printf '%-22s %12s %14s %17s× %11s×\n' "$target" "$rate" "$cost" \
    "$(ratio "$rate" "$(median "${qps[powerdns]}")")" "$(ratio "$cost" "$(median "${cpu[powerdns]}")")"
done
