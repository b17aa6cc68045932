#!/usr/bin/env bash
# Everything the GPU half of the benchmarks shows, in one call on the GPU host:
#   the GPU tests; `xferd probe --json` (64 MiB, 20 iterations) beside the plain
#   cudaMemcpy/events loop on the same sizes (ratio per mode); 30 back-to-back pinned h2d
#   probes (CV), the GPU time of the default cycle and its duty cycle at 60 s, the device
#   memory the backend holds; compute-sanitizer memcheck and racecheck on the GPU tests.
#
#   bench/gpu/run.sh [OUT_DIR]      from the repository root; OUT_DIR defaults to $OUT
#
# It runs the programs of a bundle made on the build machine (XFERD_BUNDLE, default
# .devbundle: ../shared/device/bundle.sh build-cuda .devbundle). Writes at most 8 files.
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

step "xferd probe --json (64 MiB, 20 iterations)"
timeout 120 "$b/xferd" probe --json --size 64MiB --iterations 20 > "$out/probe.json" 2>> "$out/machine.txt"
echo "xferd probe exit $? (1 = something below its band or failed)"

step plain cudaMemcpy loop
timeout 120 "$b/bench/gpu/xferd_plain_copy" --size $((64 << 20)) --iterations 20 > "$out/plain.json" || status=1

step "probe cycles: 30 x pinned h2d, 3 default cycles"
timeout 300 "$b/bench/gpu/xferd_probe_cycles" --cycles 30 --full-cycles 3 > "$out/cycles.json" || status=1

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
