#!/usr/bin/env bash
# trafik's authoritative DNS vs PowerDNS (pdns_server with the bind backend), same zone, one run
# on loopback, both started here on free loopback ports and stopped by their PIDs.
#
# dnsperf sends a fixed query mix for DURATION seconds per target and round: A and AAAA of
# static names, a TXT, the apex SOA and NS, and a name that does not exist (NXDOMAIN). A third
# row asks trafik for a policy name (geo, with an ECS option from one of four client groups), a
# kind of answer PowerDNS's bind backend does not have. Rounds are interleaved; medians of
# queries per second and of the server's CPU microseconds per query (utime+stime from /proc, all
# threads), then the ratios trafik/PowerDNS.
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
# dnsperf has no per-query ECS; the policy mix varies the name's case instead (same answer).
cat >"$work/policy.txt" <<'Q'
cografi.kargo.test A
COGRAFI.kargo.test A
Cografi.kargo.test A
cografi.KARGO.test A
Q

"$trafik" serve -c "$work/trafik.toml" >"$work/trafik.log" 2>&1 &
trafik_pid=$!
pids+=("$trafik_pid")
pdns_server --no-config --daemon=no --guardian=no --disable-syslog --write-pid=no \
  --socket-dir="$work" --local-address=127.0.0.1 --local-port="$pdns_port" \
  --launch=bind --bind-config="$work/named.conf" \
  --receiver-threads="$WORKERS" --reuseport=yes >"$work/pdns.log" 2>&1 &
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
done

declare -A qps cpu
run() { # target port pid queries-file
  local before after out rate
  before=$(ticks "$3")
  out=$(dnsperf -s 127.0.0.1 -p "$2" -d "$4" -l "$DURATION" -c "$CLIENTS" -T 2 -q 200 2>&1)
  after=$(ticks "$3")
  rate=$(awk '/Queries per second/ { print $4 }' <<<"$out")
  local sent
  sent=$(awk '/Queries completed/ { print $3 }' <<<"$out")
  qps[$1]+=" $rate"
  cpu[$1]+=" $(awk -v t=$((after - before)) -v hz="$hz" -v n="$sent" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "-" }')"
}
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  run trafik "$trafik_port" "$trafik_pid" "$work/static.txt"
  run powerdns "$pdns_port" "$pdns_pid" "$work/static.txt"
  run trafik-geo "$trafik_port" "$trafik_pid" "$work/policy.txt"
done

printf '%-12s %14s %14s\n' target "queries/s" "CPU µs/query"
for target in trafik powerdns trafik-geo; do
  printf '%-12s %14s %14s\n' "$target" "$(median "${qps[$target]}")" "$(median "${cpu[$target]}")"
done
echo
printf 'trafik/powerdns  queries/s %s×   CPU per query %s×\n' \
  "$(ratio "$(median "${qps[trafik]}")" "$(median "${qps[powerdns]}")")" \
  "$(ratio "$(median "${cpu[trafik]}")" "$(median "${cpu[powerdns]}")")"
