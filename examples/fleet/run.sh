#!/usr/bin/env bash
# The fleet on loopback: one etcd (2379), one Redis (6379), three replicas (8801–8803) and three
# trafik instances on 127.0.0.11–13 (web 8080, admin 9090, DNS 5300) that all follow
# fleet.toml in etcd. It shows DNS spreading clients, the same key landing on the same replica
# through each instance, a push reaching all three, then stops everything it started.
#
#   examples/fleet/run.sh              # TRAFIK=path/to/trafik, FLEET_SECONDS=N to keep it up N s
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The binary: $TRAFIK, else `trafik` on the PATH (cargo install --path crates/trafik), else the
# one the README's first command built (target/debug), else a release build of this checkout.
trafik=${TRAFIK:-$(command -v trafik || true)}
for built in "$here/../../target/debug/trafik" "$here/../../target/release/trafik"; do
  [[ -z $trafik && -x $built ]] && trafik=$built
done
[[ -n $trafik ]] || { echo "no trafik binary: run cargo build -p trafik, or set TRAFIK" >&2; exit 2; }
etcd_url=http://127.0.0.1:2379
prefix=/filo/
data=$(mktemp -d)
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$data"
}
trap stop EXIT

etcd --name filo --data-dir "$data/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster filo=http://127.0.0.1:2380 >"$data/etcd.log" 2>&1 &
pids+=($!)
redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no >"$data/redis.log" 2>&1 &
pids+=($!)
for i in 1 2 3; do
  "$trafik" upstream --name "k$i" --listen "127.0.0.1:880$i" >/dev/null &
  pids+=($!)
done
for _ in $(seq 50); do curl -fs "$etcd_url/health" >/dev/null && break; sleep 0.2; done

"$trafik" config push "$here/fleet.toml" --etcd "$etcd_url" --etcd-prefix "$prefix"
for i in 1 2 3; do
  "$trafik" serve --etcd "$etcd_url" --etcd-prefix "$prefix" --instance "t$i" \
    --listen "web=127.0.0.1$i:8080" --listen "dns=127.0.0.1$i:5300" \
    --admin "127.0.0.1$i:9090" >"$data/t$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 50); do curl -fs "http://127.0.0.1$i:9090/status" >/dev/null && break; sleep 0.2; done
done
sleep 1.5 # the DNS health checks see all three up

echo "--- DNS spreads clients over the three instances"
for _ in 1 2 3 4 5 6; do dig @127.0.0.11 -p 5300 +short filo.kargo.test; done
echo "--- the same key, the same replica through every instance"
for i in 1 2 3; do
  printf 't%s: ' "$i"
  curl -s -o /dev/null -D - -H 'x-istemci: musteri-42' "http://127.0.0.1$i:8080/takip/TR-1" | grep -i '^x-kopya'
done
echo "--- a push reaches all three"
sed 's/name = "filo"/name = "filo-2"/' "$here/fleet.toml" >"$data/fleet-2.toml"
"$trafik" config push "$data/fleet-2.toml" --etcd "$etcd_url" --etcd-prefix "$prefix"
sleep 0.5
"$trafik" status --etcd "$etcd_url" --etcd-prefix "$prefix"
sleep "${FLEET_SECONDS:-0}"
