#!/usr/bin/env bash
# `xferd run` on the real GPU: a few minutes at a short interval with every probe in every
# cycle, /metrics scraped after each cycle; then the daemon under compute-sanitizer memcheck
# and racecheck for several cycles each.
#
#   bench/gpu/daemon_run.sh OUT_DIR [SECONDS]     (from the repository root; default 180 s;
#   the whole script takes SECONDS + about 160 s)
#
# Runs the bundle made on the build machine (XFERD_BUNDLE, default .devbundle). Writes
# daemon.log, daemon_metrics.prom, daemon_summary.json and sanitizer_daemon.log to OUT_DIR.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: daemon_run.sh OUT_DIR [SECONDS]}
secs=${2:-180}
use_bundle "$out"
work=$(mktemp -d)
trap 'pkill -TERM -f "$work/" 2>/dev/null; rm -rf "$work"' EXIT
port=19742

write_config() {  # FILE INTERVAL SIZE ITERATIONS DEADLINE BUDGET STATE
  xferd_toml "$port" "$7" > "$1" <<TOML
[probe]
interval = "$2"
jitter = 0.0
sizes = ["$3"]
iterations = $4
deadline = "$5"
cycle_budget = "$6"
max_duty_cycle = 1.0
TOML
}

scrape() { http_get "http://127.0.0.1:$port/metrics"; }
wait_ready() {  # seconds
  for _ in $(seq 1 "$1"); do
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://127.0.0.1:$port/healthz" 2>/dev/null && return 0
    sleep 1
  done
  return 1
}

echo "== $(date -u +%T) xferd run on the GPU: ${secs}s, interval 10s, 64 MiB, 20 iterations, every probe each cycle"
write_config "$work/run.toml" 10s 64MiB 20 5s 9s "$work/state"
start=$(date +%s.%N)
"$b/xferd" run --config "$work/run.toml" > "$out/daemon.log" 2>&1 &
pid=$!
wait_ready 60 || echo "daemon not ready after 60 s"
ready=$(date +%s.%N)
sleep "$secs"
scrape > "$out/daemon_metrics.prom"
t0=$(date +%s.%N); kill -TERM $pid; wait $pid; rc=$?; t1=$(date +%s.%N)
python3 - "$out/daemon_metrics.prom" "$start" "$ready" "$t0" "$t1" "$rc" > "$out/daemon_summary.json" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
start, ready, t0, t1, rc = map(float, sys.argv[2:])
series = re.findall(r'^(xferd_[a-z_]+)(\{[^}]*\})? (\S+)$', text, re.M)
def labels(s): return dict(re.findall(r'(\w+)="([^"]*)"', s or ""))
bw = {f'{l["mode"]} {l["direction"]}': float(v) / 1e9
      for n, s, v in series if n == "xferd_bandwidth_bytes_per_second" for l in [labels(s)]}
runs = {}
for n, s, v in series:
    if n == "xferd_probe_runs_total" and float(v) > 0:
        l = labels(s); runs[f'{l["mode"]} {l["result"]}'] = float(v)
one = {n: float(v) for n, s, v in series if not s}
dev = sum(float(v) for n, s, v in series if n == "xferd_probe_device_seconds_total")
cycles = sum(float(v) for n, s, v in series if n == "xferd_cycles_total")
print(json.dumps({
    "bandwidth_gb_per_s": bw, "probe_runs": runs, "cycles": cycles,
    "last_cycle_wall_s": one.get("xferd_cycle_duration_seconds"),
    "device_seconds_by_gpu": {labels(s).get("gpu"): float(v) for n, s, v in series
                              if n == "xferd_probe_device_seconds_total"},
    "device_seconds_total": dev, "wall_s": t0 - start,
    "duty_cycle_this_run": dev / (t0 - start) if t0 > start else None,
    "ready_after_s": ready - start, "sigterm_exit_s": t1 - t0, "exit_code": rc,
    "series": len(series)}, indent=1))
PY
cat "$out/daemon_summary.json"

# Under compute-sanitizer kernels run far slower: smaller transfers, fewer of them, long
# deadlines. SIGTERM goes to xferd itself (the sanitizer waits for it).
for tool in memcheck racecheck; do
  echo "== $(date -u +%T) compute-sanitizer --tool $tool on xferd run (75 s)"
  write_config "$work/$tool.toml" 15s 4MiB 3 10s 14s "$work/state-$tool"
  compute-sanitizer --tool $tool --error-exitcode 3 "$b/xferd" run --config "$work/$tool.toml" \
    > "$work/$tool.log" 2>&1 &
  san=$!
  sleep 75
  pkill -TERM -f "xferd run --config $work/$tool.toml" -n
  wait $san; echo "compute-sanitizer $tool exit $?" >> "$work/$tool.log"
  grep -E 'cycle|ERROR SUMMARY|RACECHECK SUMMARY|exit' "$work/$tool.log" | tail -n 8
  { echo "=== $tool"; cat "$work/$tool.log"; } >> "$out/sanitizer_daemon.log"
done
