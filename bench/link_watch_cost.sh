#!/usr/bin/env bash
# What the link watch costs on an 8-GPU host, two ways (docs/performance.md, "The link watch"):
#
#   1. one poll, measured by Google Benchmark (xferd_bench_host --benchmark_filter=LinkWatch)
#      over the 8-GPU fake tree tests/data/sysfs/hgx-8gpu (or XFERD_LINK_WATCH_ROOT, e.g.
#      /sys on a GPU host), times the default rate of one poll every 2 s: back to back (hot
#      caches) and as the daemon's thread polls, after a sleep (the figure that counts);
#   2. the daemon's own CPU time, `xferd run` on the simulated 8-GPU node on that tree, with
#      the watch on ([health] link_watch_interval = "2s") and off ("0s"), SECONDS each (120),
#      in PAIRS alternating pairs, probes only in the first cycle (interval 1h) so the watch
#      is what is left; and the watch's own thread (named xferd-linkwatch) in the runs with it
#      on: the figure that is the watch's alone (the daemon's whole differs by the noise of
#      a shared machine too).
#
#   bench/link_watch_cost.sh [SECONDS]      (from the repository root; XFERD_BUILD=build,
#                                            PAIRS=2 on/off pairs: 4 x SECONDS in all;
#                                            INTERVAL=2s the watch's interval when on)
#
# CPU times are the kernel's per-thread run times (/proc/PID/task/*/schedstat, nanoseconds)
# summed over the daemon's threads, from 5 s after it is ready to the end of the run. The
# budget: 0.01 % of a core (100 millionths) for the watch.
set -euo pipefail
secs=${1:-120}
build=${XFERD_BUILD:-build}
xferd=$build/xferd
bench=$build/bench/xferd_bench_host
tree=$(realpath "${XFERD_SOURCE_DIR:-.}/tests/data/sysfs/hgx-8gpu")
for f in "$xferd" "$bench"; do
  [[ -x $f ]] || { echo "$f missing: cmake --build $build --target xferd xferd_bench_host" >&2; exit 2; }
done
work=$(mktemp -d)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== one poll over ${XFERD_LINK_WATCH_ROOT:-$tree} (Google Benchmark, CPU time of the thread)"
"$bench" --benchmark_filter='LinkWatch' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json > "$work/bench.json"
python3 - "$work/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for b in doc["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    print(f'{b["run_name"]:32s} {b["cpu_us_per_poll"]:8.2f} us a poll ({b["files"]:.0f} files, '
          f'{b["gpus"]:.0f} GPUs): {b["core_ppm_at_2s"]:7.2f} millionths of a core at one poll '
          f'every 2 s (budget 100)')
PY

# The daemon's threads' run time now, in ns; and the watch thread's alone ("" when none).
cpu_ns() {
  local total=0 t
  for t in /proc/"$1"/task/*; do
    read -r run _ < "$t/schedstat" 2>/dev/null || continue
    total=$((total + run))
  done
  echo "$total"
}
watch_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    if [[ $(cat "$t/comm" 2>/dev/null) == xferd-linkwatch ]]; then
      read -r run _ < "$t/schedstat"; echo "$run"; return
    fi
  done
  echo 0
}

run_daemon() {  # NAME INTERVAL -> prints "total_ns watch_ns wall_s"
  local name=$1 interval=$2 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat > "$work/$name.toml" <<TOML
[web]
listen_address = "127.0.0.1:$port"
[daemon]
state_dir = "$work/state-$name"
[probe]
interval = "1h"
[health]
link_watch_interval = "$interval"
[simulate]
enabled = true
time_scale = 0.0
sysfs_root = "$tree"
TOML
  "$xferd" run --config "$work/$name.toml" > "$work/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 60); do
    grep -q "ready: first probe cycle done" "$work/$name.log" && break
    sleep 1
  done
  sleep 5
  local t0 w0 s0 t1 w1 s1
  t0=$(cpu_ns "$pid"); w0=$(watch_ns "$pid"); s0=$(date +%s.%N)
  sleep "$secs"
  t1=$(cpu_ns "$pid"); w1=$(watch_ns "$pid"); s1=$(date +%s.%N)
  kill -TERM "$pid"; wait "$pid" || true; pid=
  echo "$((t1 - t0)) $((w1 - w0)) $(python3 -c "print($s1 - $s0)")"
}

pairs=${PAIRS:-2}
echo "== xferd run on the simulated 8-GPU node ($tree): $pairs pairs of runs, watch on then off," \
  "${secs} s each, probes only at the start"
: > "$work/runs"
for i in $(seq 1 "$pairs"); do
  read -r on_ns on_watch_ns on_s < <(run_daemon on "${INTERVAL:-2s}")
  read -r off_ns _ off_s < <(run_daemon off 0s)
  echo "$on_ns $on_watch_ns $on_s $off_ns $off_s" >> "$work/runs"
done
python3 - "$work/runs" <<'PY'
import statistics, sys
rows = [[float(x) for x in line.split()] for line in open(sys.argv[1])]
diffs, watches = [], []
for n, (on_ns, watch_ns, on_s, off_ns, off_s) in enumerate(rows, 1):
    on, off, watch = on_ns / 1e9 / on_s, off_ns / 1e9 / off_s, watch_ns / 1e9 / on_s
    diffs.append(on - off)
    watches.append(watch)
    print(f"pair {n}: daemon {100*on:.4f} % of a core with the watch on, "
          f"{100*off:.4f} % off: {100*(on-off):+.4f} %; the watch's own thread "
          f"{watch_ns/1e6:.2f} ms in {on_s:.0f} s = {100*watch:.5f} %")
print(f"median: daemon on - off {100*statistics.median(diffs):+.4f} % of a core; the watch's own "
      f"thread {100*statistics.median(watches):.5f} % ({1e6*statistics.median(watches):.1f} "
      f"millionths; budget 100)")
PY
