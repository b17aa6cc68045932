#!/usr/bin/env bash
# xferd's /metrics beside its peers, in one run on the simulated device, on this machine:
#   1. series and bytes per GPU in the exposition, with 1 and with 8 simulated GPUs (short
#      interval, time_scale 0, until every baseline is learned: the steady-state set);
#   2. wrk against xferd (1 simulated GPU, time_scale 1, the DEFAULT config otherwise:
#      60 s interval, 1 % duty cap; baselines restored from step 1's state file), Debian's
#      node_exporter (default collectors) and nginx serving the bytes of one xferd scrape
#      as a static file: requests/s, p50, p99, and the ratios xferd/nginx and
#      xferd/node_exporter;
#   3. xferd's resident memory and CPU over --idle-seconds of cycles with no scrapes.
# Everything on loopback, bounded in time; every process it starts is stopped on exit.
#
#   bench/http_compare.sh [--xferd PATH] [--out DIR] [--idle-seconds 300]
#                         [--wrk-seconds 20] [--wrk-threads 2] [--wrk-connections 16]
#
# Writes DIR/results.json and DIR/results.txt (the table), plus the scrapes and wrk logs.
set -euo pipefail

xferd=${XFERD_BINARY:-build/xferd}
out=""
idle_s=300
wrk_s=20
wrk_threads=2
wrk_conns=16
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --xferd) xferd=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --idle-seconds) idle_s=$2; shift 2 ;;
    --wrk-seconds) wrk_s=$2; shift 2 ;;
    --wrk-threads) wrk_threads=$2; shift 2 ;;
    --wrk-connections) wrk_conns=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "http_compare.sh: unknown argument '$1'; see --help" >&2; exit 64 ;;
  esac
done
for n in "$idle_s" "$wrk_s" "$wrk_threads" "$wrk_conns"; do
  [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "http_compare.sh: '$n' is not a positive whole number" >&2; exit 64; }
done
[ -x "$xferd" ] || { echo "http_compare.sh: no xferd binary at '$xferd'; build it (cmake --build <dir> --target xferd) and pass --xferd <dir>/xferd" >&2; exit 66; }
for tool in wrk nginx prometheus-node-exporter curl python3; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
    echo "http_compare.sh: '$tool' not found; run deploy/install-deps.sh" >&2; exit 69; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
out=${out:-/tmp/xferd-http-compare-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
xferd=$(cd "$(dirname "$xferd")" && pwd)/$(basename "$xferd")

work=$(mktemp -d /tmp/xferd-http-compare.XXXXXX)
chmod 755 "$work"  # nginx workers drop to nobody and must read the static file
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "== $(date -u +%T) $*" >&2; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Wait until URL answers 200 (at most $2 seconds).
wait_http() {
  local url=$1 limit=$2 i
  for ((i = 0; i < limit * 10; i++)); do
    curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "http_compare.sh: $url did not answer within ${limit} s" >&2
  return 1
}
# Sum of xferd_cycles_total over results, from a scrape of URL.
cycles_done() {
  curl -fsS "$1" 2>/dev/null | awk '/^xferd_cycles_total/ {s += $2} END {printf "%d\n", s}'
}
wait_cycles() {
  local url=$1 want=$2 limit=$3 i
  for ((i = 0; i < limit * 5; i++)); do
    [ "$(cycles_done "$url")" -ge "$want" ] && return 0
    sleep 0.2
  done
  echo "http_compare.sh: $url did not finish $want cycles within ${limit} s" >&2
  return 1
}
# Start xferd with a config; sets $xferd_pid and $xferd_url.
start_xferd() {
  local name=$1 config=$2 port
  port=$(free_port)
  mkdir -p "$work/$name/state"
  "$xferd" run -c "$config" --state-dir "$work/$name/state" \
    --web.listen-address "127.0.0.1:$port" --log.level warn >"$out/$name.log" 2>&1 &
  xferd_pid=$!
  pids+=("$xferd_pid")
  xferd_url=http://127.0.0.1:$port/metrics
  wait_http "$xferd_url" 30
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "machine: $(nproc) cores, load $load_start"

# ---- 1. Series and bytes per GPU (steady state: every baseline learned) ----------------
# Baselines need kMinBaselineCycles (5) cycles; 8 cycles at a 1 s interval, time_scale 0
# and no duty cap get there in seconds. The exposition's shape is the same as at 60 s. The
# deadline is held against simulated time: 500 ms fits the slowest 64 MiB probe (~0.25 s).
for gpus in 1 8; do
  cat >"$work/series$gpus.toml" <<EOF
[probe]
interval = "1s"
deadline = "500ms"
cycle_budget = "900ms"
jitter = 0
max_duty_cycle = 1.0
[simulate]
enabled = true
devices = $gpus
time_scale = 0
EOF
  say "series: $gpus simulated GPU(s), 8 cycles"
  start_xferd "series$gpus" "$work/series$gpus.toml"
  wait_cycles "$xferd_url" 8 120
  curl -fsS "$xferd_url" >"$out/scrape_${gpus}gpu.prom"
  stop_pid "$xferd_pid"
done

# ---- 2. wrk: xferd, node_exporter, nginx on the same bytes -----------------------------
# The default config but for the simulated device and a state dir seeded with the
# baselines step 1 learned for the same simulated GPU (same seed, same UUID), so the very
# first cycle already exports the full steady-state set.
cat >"$work/xferd.toml" <<EOF
[simulate]
enabled = true
devices = 1
time_scale = 1
EOF
mkdir -p "$work/main/state"
cp "$work/series1/state/state.json" "$work/main/state/" 2>/dev/null || true
say "xferd: default config (interval 60s), 1 simulated GPU, time_scale 1"
start_xferd main "$work/xferd.toml"
wait_cycles "$xferd_url" 1 120
main_pid=$xferd_pid
main_url=$xferd_url
curl -fsS "$main_url" >"$out/scrape_served.prom"

ne_port=$(free_port)
say "node_exporter on 127.0.0.1:$ne_port"
prometheus-node-exporter --web.listen-address="127.0.0.1:$ne_port" >"$out/node_exporter.log" 2>&1 &
ne_pid=$!
pids+=("$ne_pid")
ne_url=http://127.0.0.1:$ne_port/metrics
wait_http "$ne_url" 30

ng_port=$(free_port)
mkdir -p "$work/nginx/www" "$work/nginx/tmp"
cp "$out/scrape_served.prom" "$work/nginx/www/metrics.prom"
chmod -R a+rX "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  sendfile on;
  server {
    listen 127.0.0.1:$ng_port;
    root $work/nginx/www;
    location = /metrics {
      default_type "text/plain; version=0.0.4; charset=utf-8";
      try_files /metrics.prom =404;
    }
  }
}
EOF
say "nginx on 127.0.0.1:$ng_port serving $(wc -c <"$out/scrape_served.prom") bytes"
"$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" \
  >"$out/nginx.log" 2>&1 &
ng_pid=$!
pids+=("$ng_pid")
ng_url=http://127.0.0.1:$ng_port/metrics
wait_http "$ng_url" 30
cmp -s <(curl -fsS "$ng_url") "$out/scrape_served.prom" || {
  echo "http_compare.sh: nginx does not serve the scrape's bytes" >&2; exit 70; }

# CPU ticks (user + system) of processes and their children (nginx's workers).
ticks() {
  local total=0 pid
  for pid in "$@" $(for p in "$@"; do cat "/proc/$p/task/$p/children" 2>/dev/null; done); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
for target in xferd nginx node_exporter; do
  case $target in
    xferd) url=$main_url; pid=$main_pid ;;
    nginx) url=$ng_url; pid=$ng_pid ;;
    node_exporter) url=$ne_url; pid=$ne_pid ;;
  esac
  say "wrk $target: ${wrk_s}s, $wrk_threads threads, $wrk_conns connections (after 3 s warm-up)"
  wrk -t"$wrk_threads" -c"$wrk_conns" -d3s "$url" >/dev/null
  t0=$(ticks "$pid")
  wrk -t"$wrk_threads" -c"$wrk_conns" -d"${wrk_s}s" --latency "$url" >"$out/wrk_$target.txt"
  t1=$(ticks "$pid")
  echo "server_cpu_ticks_during_run $((t1 - t0))" >>"$out/wrk_$target.txt"
  grep -E "Requests/sec|    50%|    99%" "$out/wrk_$target.txt" >&2
done
stop_pid "$ng_pid"
stop_pid "$ne_pid"
load_after_wrk=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 3. Idle: memory and CPU over cycles with no scrapes -------------------------------
say "idle: ${idle_s}s of cycles, no scrapes"
c0=$(cycles_done "$main_url")  # the last scrape before the window
sleep 1
t0=$(ticks "$main_pid")
rss_max=0
: >"$out/idle_rss.txt"
start=$(date +%s)
while :; do
  now=$(date +%s)
  [ $((now - start)) -ge "$idle_s" ] && break
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$main_pid/status")
  echo "$((now - start)) $rss" >>"$out/idle_rss.txt"
  [ "$rss" -gt "$rss_max" ] && rss_max=$rss
  sleep $(( idle_s - (now - start) < 10 ? idle_s - (now - start) : 10 ))
done
t1=$(ticks "$main_pid")
elapsed=$(( $(date +%s) - start ))
grep -E '^(VmRSS|VmHWM|RssAnon|RssFile|RssShmem|Threads)' "/proc/$main_pid/status" >"$out/idle_status.txt"
c1=$(cycles_done "$main_url")
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
kill -0 "$main_pid" 2>/dev/null || { echo "http_compare.sh: xferd died; see $out/main.log" >&2; exit 70; }

# ---- Report ----------------------------------------------------------------------------
python3 - "$out" <<EOF
import json, os, re, sys
out = sys.argv[1]

def latency_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v

def wrk(name):
    text = open(os.path.join(out, f"wrk_{name}.txt")).read()
    r = {"requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}
    for q in ("50", "99"):
        r[f"p{q}_ms"] = latency_ms(re.search(rf"^\s+{q}%\s+(\S+)", text, re.M).group(1))
    errors = re.search(r"Socket errors: (.*)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    r["socket_errors"] = errors.group(1) if errors else "none"
    r["non_2xx"] = int(non2xx.group(1)) if non2xx else 0
    r["server_cpu_s"] = int(re.search(r"server_cpu_ticks_during_run (-?\d+)", text).group(1)) / os.sysconf("SC_CLK_TCK")
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    r["requests"] = requests
    r["server_cpu_us_per_request"] = 1e6 * r["server_cpu_s"] / requests if requests else None
    return r

def exposition(path, gpus):
    text = open(path).read()
    series = [l for l in text.splitlines() if l and not l.startswith("#")]
    per_gpu = [sum(1 for l in series if f'gpu="{g}"' in l) for g in range(gpus)]
    return {"gpus": gpus, "bytes": len(text.encode()), "series": len(series),
            "series_per_gpu_max": max(per_gpu), "series_without_gpu": len(series) - sum(per_gpu),
            "bytes_per_gpu": len(text.encode()) / gpus}

tck = os.sysconf("SC_CLK_TCK")
res = {
    "date_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
    "machine": {"nproc": os.cpu_count(),
                "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
                "mem_total_kib": int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))),
                "load_start": "$load_start", "load_after_wrk": "$load_after_wrk", "load_end": "$load_end"},
    "xferd_config": "simulated, 1 GPU, time_scale 1, default probe config (interval 60s, jitter 0.1, 1% duty cap, 64MiB, 20 iterations)",
    "wrk": {"threads": $wrk_threads, "connections": $wrk_conns, "seconds": $wrk_s,
            "served_bytes": os.path.getsize(os.path.join(out, "scrape_served.prom"))},
}
for name in ("xferd", "nginx", "node_exporter"):
    res["wrk"][name] = wrk(name)
x, n, ne = res["wrk"]["xferd"], res["wrk"]["nginx"], res["wrk"]["node_exporter"]
res["ratios"] = {
    "xferd_over_nginx_throughput": x["requests_per_s"] / n["requests_per_s"],
    "xferd_over_nginx_p99": x["p99_ms"] / n["p99_ms"],
    "xferd_over_node_exporter_throughput": x["requests_per_s"] / ne["requests_per_s"],
    "xferd_over_node_exporter_p99": x["p99_ms"] / ne["p99_ms"],
}
status = dict(l.split(":", 1) for l in open(os.path.join(out, "idle_status.txt")))
kib = lambda k: int(status[k].split()[0])
cpu_s = ($t1 - $t0) / tck
res["idle"] = {"seconds": $elapsed, "cycles": $c1 - $c0, "cpu_s": cpu_s,
               "cpu_percent_of_core": 100 * cpu_s / $elapsed,
               "vm_rss_kib": kib("VmRSS"), "vm_rss_max_kib": max($rss_max, kib("VmRSS")),
               "vm_hwm_kib": kib("VmHWM"), "rss_anon_kib": kib("RssAnon"), "rss_file_kib": kib("RssFile"),
               "threads": int(status["Threads"]), "probe_buffers_kib": 0}
res["exposition"] = [exposition(os.path.join(out, f"scrape_{g}gpu.prom"), g) for g in (1, 8)]
e1, e8 = res["exposition"]
res["exposition_marginal_per_gpu"] = {"bytes": (e8["bytes"] - e1["bytes"]) / 7,
                                      "series": (e8["series"] - e1["series"]) / 7}
t = {"throughput >= 0.5 x nginx": res["ratios"]["xferd_over_nginx_throughput"] >= 0.5,
     "p99 <= 2 x nginx": res["ratios"]["xferd_over_nginx_p99"] <= 2,
     "RSS <= 32 MiB": res["idle"]["vm_rss_max_kib"] <= 32 * 1024,
     "idle CPU <= 0.1 % of a core": res["idle"]["cpu_percent_of_core"] <= 0.1,
     "<= 300 series per GPU": max(e["series_per_gpu_max"] for e in res["exposition"]) <= 300}
res["targets_met"] = t
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=2)

m = res["machine"]
lines = [f"xferd /metrics beside its peers ({res['date_utc']}; {m['nproc']} cores {m['cpu']}, "
         f"{m['mem_total_kib'] // 1024} MiB; load {m['load_start']} at start, {m['load_end']} at end)",
         f"wrk -t{res['wrk']['threads']} -c{res['wrk']['connections']} -d{res['wrk']['seconds']}s --latency; "
         f"{res['wrk']['served_bytes']} bytes per response", "",
         f"{'server':<15} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'CPU us/req':>11}  errors"]
for name in ("xferd", "nginx", "node_exporter"):
    w = res["wrk"][name]
    lines.append(f"{name:<15} {w['requests_per_s']:>10.0f} {w['p50_ms']:>9.3f} {w['p99_ms']:>9.3f} "
                 f"{w['server_cpu_us_per_request']:>11.0f}  socket: {w['socket_errors']}; non-2xx: {w['non_2xx']}")
r = res["ratios"]
lines += ["", f"xferd/nginx: throughput {r['xferd_over_nginx_throughput']:.2f}x, p99 {r['xferd_over_nginx_p99']:.2f}x",
          f"xferd/node_exporter: throughput {r['xferd_over_node_exporter_throughput']:.1f}x, p99 {r['xferd_over_node_exporter_p99']:.2f}x",
          "CPU us/req: the server's user+system CPU time over the run / requests served", ""]
i = res["idle"]
lines += [f"idle {i['seconds']} s, {i['cycles']} cycles, no scrapes: CPU {i['cpu_s']:.2f} s = "
          f"{i['cpu_percent_of_core']:.3f} % of a core; VmRSS {i['vm_rss_kib'] / 1024:.1f} MiB "
          f"(max {i['vm_rss_max_kib'] / 1024:.1f}, HWM {i['vm_hwm_kib'] / 1024:.1f}; anon {i['rss_anon_kib'] / 1024:.1f}, "
          f"file {i['rss_file_kib'] / 1024:.1f}); {i['threads']} threads; probe buffers: none (simulated)", ""]
for e in res["exposition"]:
    lines.append(f"exposition, {e['gpus']} GPU(s): {e['bytes']} bytes, {e['series']} series; "
                 f"{e['bytes_per_gpu']:.0f} bytes/GPU; {e['series_per_gpu_max']} series with a gpu label per GPU, "
                 f"{e['series_without_gpu']} without")
mp = res["exposition_marginal_per_gpu"]
lines += [f"each GPU past the first adds {mp['bytes']:.0f} bytes and {mp['series']:.0f} series", ""]
lines += [f"target {k}: {'met' if v else 'MISSED'}" for k, v in t.items()]
open(os.path.join(out, "results.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
say "results in $out"
