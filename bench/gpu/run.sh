#!/usr/bin/env bash
# Everything the GPU half of the benchmarks shows, in one call on the GPU host:
#   the GPU tests; `xferd probe --json` (64 MiB, 20 iterations) for every mode, and for
#   pinned and pageable alternating with the plain cudaMemcpy/events loop (a ratio per
#   pair); 3 sets of 30 back-to-back pinned h2d probes (CV); the GPU time of the default
#   cycle and its duty cycle at 60 s; the device memory the backend holds;
#   compute-sanitizer memcheck and racecheck on the GPU tests.
#
#   bench/gpu/run.sh [OUT_DIR]      from the repository root; OUT_DIR defaults to $OUT
#
# It runs the programs of a bundle made on the build machine (XFERD_BUNDLE, default
# .devbundle, laid out as bench/gpu/README.md says). Writes at most 8 files.
# The other GPU programs and scripts (the co-located workload and contention run, the
# every-GPU-at-once reference) are listed in bench/gpu/README.md.
set -uo pipefail
out=${1:-${OUT:?give an output directory}}
mkdir -p "$out"
bundle=${XFERD_BUNDLE:-.devbundle}
# shellcheck disable=SC1091
. "$bundle/env.sh"
b=$bundle/build
here=$(cd "$(dirname "$0")" && pwd)
status=0
step() { echo "== $(date -u +%T) $*"; }

step machine
{
  date -u
  uname -a
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total --format=csv
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    echo "$d: $(cat "$d/current_link_speed" 2>/dev/null) x$(cat "$d/current_link_width" 2>/dev/null) (max $(cat "$d/max_link_speed" 2>/dev/null) x$(cat "$d/max_link_width" 2>/dev/null)) numa $(cat "$d/numa_node" 2>/dev/null)"
  done
  "$b/xferd" version
  ulimit -l | sed 's/^/ulimit -l: /'
} > "$out/machine.txt" 2>&1

step gpu tests
timeout 300 "$b/tests/xferd_gpu_tests" > "$out/gpu_tests.log" 2>&1 || { status=1; echo "gpu tests FAILED"; }
tail -3 "$out/gpu_tests.log"

step "xferd probe --json (64 MiB, 20 iterations), every mode"
timeout 120 "$b/xferd" probe --json --size 64MiB --iterations 20 > "$out/probe.json" 2>> "$out/machine.txt"
echo "xferd probe exit $? (1 = something below its band or failed)"

# This host's bandwidth drifts by a few percent for seconds at a time (other tenants), so
# the probe and the plain loop alternate, and each pair gives a ratio.
step "pinned/pageable: plain loop and xferd probe, alternating, 5 pairs"
pairs=$(mktemp -d)
for rep in 1 2 3 4 5; do
  timeout 60 "$b/bench/gpu/xferd_plain_copy" --size $((64 << 20)) --iterations 20 > "$pairs/plain_$rep.json" || status=1
  timeout 60 "$b/xferd" probe --json --mode pinned,pageable --size 64MiB --iterations 20 > "$pairs/probe_$rep.json" 2>/dev/null
done
# Does reading the link's sysfs attributes (what `xferd probe` does every 5 ms during its
# first link-bound probe) cost the copies anything? The plain loop, with and without.
gpu_dev=$(grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null | head -1 | xargs -r dirname)
if [ -n "$gpu_dev" ]; then
  ( while :; do cat "$gpu_dev/current_link_speed" "$gpu_dev/current_link_width" \
      "$gpu_dev/max_link_speed" "$gpu_dev/max_link_width" > /dev/null; sleep 0.005; done ) &
  poller=$!
  timeout 60 "$b/bench/gpu/xferd_plain_copy" --size $((64 << 20)) --iterations 20 > "$pairs/polled_plain.json"
  kill "$poller"
  timeout 60 "$b/bench/gpu/xferd_plain_copy" --size $((64 << 20)) --iterations 20 > "$pairs/unpolled_plain.json"
fi
python3 - "$pairs" "$out/pairs.json" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
read = lambda name: json.loads((d / name).read_text() or "null") if (d / name).exists() else None
reps = sorted({p.stem.split("_")[1] for p in d.glob("probe_*.json")})
doc = {"pairs": [{"plain": read(f"plain_{r}.json"), "probe": read(f"probe_{r}.json")} for r in reps],
       "plain_while_link_polled": read("polled_plain.json"),
       "plain_not_polled": read("unpolled_plain.json")}
pathlib.Path(sys.argv[2]).write_text(json.dumps(doc))
PY

step "probe cycles: 3 sets of 30 x pinned h2d, 3 default cycles"
timeout 300 "$b/bench/gpu/xferd_probe_cycles" --sets 3 --cycles 30 --full-cycles 3 > "$out/cycles.json" || status=1

step compute-sanitizer memcheck + racecheck on the GPU tests
{
  # Bandwidth bounds do not hold under instrumentation; every other test runs.
  for tool in memcheck racecheck; do
    echo "### compute-sanitizer --tool $tool"
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$b/tests/xferd_gpu_tests" --gtest_filter='-*Bandwidth*'
    echo "### $tool exit $?"
  done
} > "$out/sanitizer.log" 2>&1
grep -E '^### |ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer.log"
grep -q '### memcheck exit 0' "$out/sanitizer.log" && grep -q '### racecheck exit 0' "$out/sanitizer.log" || status=1

step summary
python3 "$here/summarize.py" "$out" | tee "$out/summary.txt"
exit $status
