# Shared by the bench scripts: build trafik, remember the processes a script starts and stop
# them (by PID) on exit, wait for a port. Source it; it sets $root, $trafik and $work.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# TRAFIK=path/to/trafik runs that binary instead of building the release one; PGO=1 builds
# the release one with profile-guided optimization (scripts/pgo-build.sh).
if [[ -n ${TRAFIK:-} ]]; then
  trafik=$TRAFIK
elif [[ ${PGO:-} == 1 ]]; then
  trafik=$("$root/scripts/pgo-build.sh" | tail -n 1)
  [[ -x $trafik ]] || { echo "the PGO build failed (scripts/pgo-build.sh)" >&2; exit 1; }
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

# A free TCP port on loopback, chosen now: the machine is shared, so fixed ones may be taken or
# in TIME-WAIT.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The first of COUNT consecutive loopback ports that are free now (outside the kernel's range
# for outgoing connections): a script's processes take BASE_PORT … BASE_PORT + COUNT - 1, so
# fixed ones a user's services may hold are never assumed.
free_block() { # count
  python3 - "$1" <<'PY'
import random, socket, sys
count = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 30000 - count)
    held = []
    try:
        for port in range(base, base + count):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(base)
    break
else:
    sys.exit(f"no {count} consecutive free ports on 127.0.0.1")
PY
}

wait_for_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

# CPU ticks (utime+stime) of a process and all its descendants; with "system", only the
# kernel's share (stime).
ticks() { # pid [system]
  local total=0 pid
  for pid in $1 $(pgrep -P "$1" || true); do
    if [[ -r /proc/$pid/stat ]]; then
      # Fields after the command name (which may hold spaces): utime is 14th, stime 15th overall.
      read -r -a f < <(sed 's/^.*) //' "/proc/$pid/stat")
      if [[ ${2:-} == system ]]; then total=$((total + f[12])); else total=$((total + f[11] + f[12])); fi
    fi
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)

# Busy CPU ticks of the whole machine, all cores (user, nice, system, irq, softirq; not what a
# hypervisor stole): what the load generator, the upstream and the kernel spent besides the proxy.
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
cores=$(getconf _NPROCESSORS_ONLN) # as /proc/stat counts them, whatever this shell may run on

# What one run cost, appended to KEY's lists (declare -A CPU KERNEL REST BUSY first): the proxy's
# CPU µs per request and its kernel share (%), the rest of the machine's µs per request, and how
# busy the cores were (%). Call `charge_start PID` right before the run, `charge KEY PID
# REQUESTS` right after.
charge_start() { # pid
  charged_ticks=$(ticks "$1"); charged_system=$(ticks "$1" system)
  charged_machine=$(machine_ticks); charged_since=$(date +%s%N)
}
charge() { # key pid requests
  local proxy=$(($(ticks "$2") - charged_ticks)) system=$(($(ticks "$2" system) - charged_system))
  local machine=$(($(machine_ticks) - charged_machine)) nanos=$(($(date +%s%N) - charged_since))
  local per_request='BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "-" }'
  CPU[$1]="${CPU[$1]:-} $(awk -v t="$proxy" -v hz="$hz" -v n="${3:-0}" "$per_request")"
  KERNEL[$1]="${KERNEL[$1]:-} $(awk -v s="$system" -v t="$proxy" 'BEGIN { if (t > 0) printf "%.0f", 100 * s / t; else print "-" }')"
  REST[$1]="${REST[$1]:-} $(awk -v t=$((machine - proxy)) -v hz="$hz" -v n="${3:-0}" "$per_request")"
  BUSY[$1]="${BUSY[$1]:-} $(awk -v t="$machine" -v hz="$hz" -v ns="$nanos" -v c="$cores" 'BEGIN { printf "%.0f", 100 * t / hz / (ns / 1e9) / c }')"
}

to_ms() { # wrk prints 512.00us, 1.23ms or 1.05s
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

# The median of a space-separated list of numbers ("-" when there are none).
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)] }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# One wrk run against http://127.0.0.1:PORT/PATH after a 1 s warm-up: appends req/s and p50 ms to
# RPS[NAME] and P50[NAME], and what process PID (with its children) and the machine spent, as
# `charge` does (declare -A RPS P50 CPU KERNEL REST BUSY first). Uses THREADS, CONNECTIONS and
# DURATION, and WRK_HEADER (one request header, "Name: value") when set.
measure() { # name port pid path
  local name=$1 port=$2 pid=$3 path=$4 out rps requests p50 errors
  wrk -t"$THREADS" -c"$CONNECTIONS" -d1s ${WRK_HEADER:+-H "$WRK_HEADER"} "http://127.0.0.1:$port$path" >/dev/null
  charge_start "$pid"
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency ${WRK_HEADER:+-H "$WRK_HEADER"} "http://127.0.0.1:$port$path")
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  charge "$name" "$pid" "$requests"
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -n $errors ]] && echo "warning: $name $path: $errors" >&2
  RPS[$name]="${RPS[$name]:-} $rps"
  P50[$name]="${P50[$name]:-} $p50"
}

# The req/s ratio of KEY to PEER that KEY would reach if its user-space work cost nothing and it
# kept every core busy: per request, (PEER's CPU + the rest's in PEER's runs) / (KEY's kernel
# CPU + the rest's in KEY's runs), times 100 / PEER's busy %. The proxy shares the cores with
# the load generator and the upstream (and whatever else runs on the machine, which lands in
# "rest"), and its system calls are its own: a ratio measured in the same runs cannot pass it.
ceiling() { # key peer
  awk -v pc="$(median "${CPU[$2]}")" -v pr="$(median "${REST[$2]}")" -v pb="$(median "${BUSY[$2]}")" \
    -v kc="$(median "${CPU[$1]}")" -v kk="$(median "${KERNEL[$1]}")" -v kr="$(median "${REST[$1]}")" \
    'BEGIN { d = (kc * kk / 100 + kr) * pb / 100; if (d > 0) printf "%.2f", (pc + pr) / d; else print "-" }'
}

# The table of medians for NAMES: req/s, p50, the proxy's CPU µs per request and its kernel
# share, the rest of the machine's µs per request and how busy the cores were.
report() { # names...
  local name
  printf '\n%-16s %12s %9s %11s %8s %10s %6s\n' target "req/s" "p50 ms" "CPU µs/req" kernel "rest µs" busy
  for name in "$@"; do
    printf '%-16s %12s %9s %11s %7s%% %10s %5s%%\n' "$name" "$(median "${RPS[$name]}")" "$(median "${P50[$name]}")" \
      "$(median "${CPU[$name]}")" "$(median "${KERNEL[$name]}")" "$(median "${REST[$name]}")" "$(median "${BUSY[$name]}")"
  done
  echo "(kernel: the proxy's CPU spent in the kernel; rest: the load generator's, the upstream's and"
  echo " the kernel's other work per request; busy: the cores' use)"
}

# An haproxy configuration in FILE: HTTP mode on 127.0.0.1:PORT to the servers on BACKEND-PORTS
# (one port, or several separated by spaces, taken in turn), THREADS threads. BIND_EXTRA and
# SERVER_EXTRA add options (`proto h2`), FRONTEND_RULES lines to its frontend
# (HAPROXY_FORWARDING below).
haproxy_http_config() { # file threads port backend-ports [bind-extra] [server-extra] [frontend-rules]
  local servers="" number=0 port
  for port in $4; do
    number=$((number + 1))
    servers+="  server s$number 127.0.0.1:$port ${6:-}"$'\n'
  done
  cat >"$1" <<CONF
global
  nbthread $2
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind 127.0.0.1:$3 ${5:-}
  ${7:-}
  default_backend be
backend be
$servers
CONF
}

# haproxy as haproxy_http_config says, with WORKERS threads; its PID goes into $haproxy_pid and
# pids.
start_haproxy_http() { # port backend-ports [bind-extra] [server-extra] [frontend-rules]
  haproxy_http_config "$work/haproxy-$1.cfg" "$WORKERS" "$@"
  haproxy -db -f "$work/haproxy-$1.cfg" >"$work/haproxy-$1.out" 2>&1 &
  haproxy_pid=$!
  pids+=("$haproxy_pid")
}

# haproxy's frontend rules for the five fields trafik adds to every request by default
# (`Forwarded`, `X-Forwarded-For/-Proto/-Host`, `Via`; haproxy and nginx add none unless told):
# the same work on both sides. Checked against an echoing backend: the same values arrive.
HAPROXY_FORWARDING='option forwardfor
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header Forwarded "for=%[src];proto=http;host=\"%[req.hdr(host)]\""
  http-request add-header Via "2.0 haproxy"'

# An nginx configuration in DIR (with its logs and temporary files there) running WORKERS
# processes, the body of its http block given; h2c listeners allow 128 streams.
nginx_conf() { # dir body-of-http-block
  mkdir -p "$1/logs" "$1/tmp"
  cat >"$1/nginx.conf" <<CONF
worker_processes $WORKERS;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/tmp/body;
  proxy_temp_path $1/tmp/proxy;
  fastcgi_temp_path $1/tmp/fastcgi;
  uwsgi_temp_path $1/tmp/uwsgi;
  scgi_temp_path $1/tmp/scgi;
  http2_max_concurrent_streams 128;
  keepalive_requests 1000000;
  $2
}
CONF
}

# A backend for the HTTP/2 benches: one nginx process of one worker on 127.0.0.1:PORT answering
# every request with a fixed 6 bytes, over h2c when LISTEN_EXTRA is `http2`, else HTTP/1.1;
# its PID goes into pids, and it listens when this returns.
start_nginx_backend() { # port [listen-extra]
  WORKERS=1 nginx_conf "$work/backend-$1" "server { listen 127.0.0.1:$1 ${2:-}; location / { return 200 \"kargo\\n\"; } }"
  nginx -p "$work/backend-$1" -c "$work/backend-$1/nginx.conf" 2>"$work/backend-$1/stderr" &
  pids+=($!)
  wait_for_port "$1"
}

# trafik's configuration for the HTTP/2 benches: WORKERS workers, a plain listener on
# 127.0.0.1:PORT (h2c by prior knowledge, or HTTP/1.1) to an h2c pool of the backends on
# BACKEND-PORTS (one port, or several separated by spaces, taken in turn).
h2c_pool_config() { # file port backend-ports [pool protocol: h2c (default) or http1]
  local backends="" port
  for port in $3; do
    backends+="${backends:+, }{ address = \"127.0.0.1:$port\" }"
  done
  cat >"$1" <<CONF
[server]
workers = $WORKERS

[[listener]]
name = "h2"
listen = "127.0.0.1:$2"

[[listener.route]]
pool = "backend"

[[pool]]
name = "backend"
protocol = "${4:-h2c}"
backends = [$backends]
CONF
}

# A bearer token signed with SECRET (HS256): sub M7, iss trafik-ornek, valid for a day, as the
# JWT routes of the benches expect.
bearer_token() {
  python3 - "$1" <<'PY'
import base64, hashlib, hmac, json, sys, time
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
head = b(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
body = b(json.dumps({"sub": "M7", "iss": "trafik-ornek", "exp": int(time.time()) + 86400}).encode())
sig = b(hmac.new(sys.argv[1].encode(), f"{head}.{body}".encode(), hashlib.sha256).digest())
print(f"{head}.{body}.{sig}")
PY
}
