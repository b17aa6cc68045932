#!/usr/bin/env bash
# The whole multi-GPU check in one call on a GPU host, for any number of GPUs (1 too):
#   - the topology: nvidia-smi -L and topo -m, each NVIDIA function's link and NUMA node in
#     sysfs, lspci -tv where present;
#   - every GPU alone: `xferd probe --json --gpu N` (pinned, 64 MiB, 20 transfers)
#     alternating with the plain loop `xferd_plain_copy --gpu N` (PAIRS pairs), and the NUMA
#     node and link path xferd reports for it;
#   - every GPU at once: `xferd probe --concurrent --json` alternating with the plain
#     every-GPU-at-once reference `xferd_all_gpus_copy` (PAIRS pairs);
#   - `xferd run` on all GPUs for RUN_S seconds (concurrent groups every 20 s), /metrics at
#     the end, SIGTERM, its exit code;
#   - the GPU tests on each GPU (`xferd_gpu_tests --gpu N`) and under compute-sanitizer
#     memcheck (bandwidth bounds left out);
#   - summarize_multi_gpu.py: PASS/FAIL per check, with the figures.
#
#   bench/gpu/multi_gpu_run.sh [OUT_DIR]     from the repository root; OUT_DIR defaults to $OUT
#
# Runs the programs of a bundle made on the build machine (XFERD_BUNDLE, default
# .devbundle; bench/gpu/README.md says how). Environment: PAIRS (3), RUN_S (120), GPUS
# (default: every GPU nvidia-smi lists). Writes three files to OUT_DIR: summary.txt,
# summary.json and multi_gpu.tar.gz (every log, JSON document and scrape). Exit status: 0
# when every check passed, 1 otherwise, 69 when there is no GPU.
#
# XFERD_SIMULATE=1 runs xferd on its simulated device instead (XFERD_SYSFS_ROOT: a fake
# sysfs tree such as tests/data/sysfs/hgx-8gpu; XFERD_BUILD: the build directory) to try the
# script without a GPU: the plain references, the GPU tests and memcheck then say SKIP.
set -uo pipefail
out=${1:-${OUT:?give an output directory}}
mkdir -p "$out"
bundle=${XFERD_BUNDLE:-.devbundle}
if [ -f "$bundle/env.sh" ]; then
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
fi
b=${XFERD_BUILD:-$bundle/build}
here=$(cd "$(dirname "$0")" && pwd)
pairs=${PAIRS:-3}
run_s=${RUN_S:-120}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "== $(date -u +%T) $*" | tee -a "$work/progress.log"; }

simulate=${XFERD_SIMULATE:-0}
sim=()  # what makes xferd use its simulated device
if [ "$simulate" = 1 ]; then
  sim=(--simulate)
  [ -n "${XFERD_SYSFS_ROOT:-}" ] && sim+=(--sysfs-root "$XFERD_SYSFS_ROOT")
  all=$("$b/xferd" probe "${sim[@]}" --json --mode pinned --iterations 1 --size 4MiB |
    python3 -c 'import json, sys; print(",".join(str(d["index"]) for d in json.load(sys.stdin)["devices"]))')
elif ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "multi_gpu_run: no NVIDIA driver/GPU (nvidia-smi -L fails)" >&2
  exit 69
else
  all=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ' | paste -sd, -)
fi
gpus=${GPUS:-$all}
IFS=, read -r -a gpu_list <<< "$gpus"
gpu=1  # 0: simulated, so the plain references and the GPU tests are left out
[ "$simulate" = 1 ] && gpu=0

step "machine and topology (GPUs $gpus)"
{
  date -u
  uname -a
  [ "$gpu" = 1 ] && nvidia-smi -L
  [ "$gpu" = 1 ] && nvidia-smi --query-gpu=index,name,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv
  echo "### nvidia-smi topo -m"
  [ "$gpu" = 1 ] && nvidia-smi topo -m
  echo "### sysfs"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    echo "$(basename "$d") class $(cat "$d/class") $(cat "$d/current_link_speed" 2>/dev/null) x$(cat "$d/current_link_width" 2>/dev/null) (max $(cat "$d/max_link_speed" 2>/dev/null) x$(cat "$d/max_link_width" 2>/dev/null)) numa $(cat "$d/numa_node" 2>/dev/null) path $(readlink -f "$d")"
  done
  if command -v lspci > /dev/null; then echo "### lspci -tv"; lspci -tv; fi
  "$b/xferd" version
} > "$work/machine.txt" 2>&1

step "every GPU alone: xferd probe --gpu N against xferd_plain_copy --gpu N, $pairs pairs"
for g in "${gpu_list[@]}"; do
  for rep in $(seq 1 "$pairs"); do
    [ "$gpu" = 1 ] && timeout 120 "$b/bench/gpu/xferd_plain_copy" --gpu "$g" --size $((64 << 20)) \
      --iterations 20 > "$work/plain_gpu${g}_$rep.json" 2>> "$work/errors.log"
    timeout 120 "$b/xferd" probe "${sim[@]}" --json --gpu "$g" --mode pinned --size 64MiB \
      --iterations 20 > "$work/probe_gpu${g}_$rep.json" 2>> "$work/errors.log"
    echo "gpu $g pair $rep: probe exit $?" >> "$work/progress.log"
  done
done

step "every GPU at once: xferd probe --concurrent against xferd_all_gpus_copy, $pairs pairs"
for rep in $(seq 1 "$pairs"); do
  [ "$gpu" = 1 ] && timeout 300 "$b/bench/gpu/xferd_all_gpus_copy" --gpus "$gpus" \
    --size $((64 << 20)) --iterations 20 --trials 3 --direction h2d,d2h \
    > "$work/all_gpus_$rep.json" 2> "$work/all_gpus_$rep.txt"
  gpu_args=()
  for g in "${gpu_list[@]}"; do gpu_args+=(--gpu "$g"); done
  timeout 300 "$b/xferd" probe "${sim[@]}" --concurrent --json "${gpu_args[@]}" --size 64MiB \
    --iterations 20 > "$work/concurrent_$rep.json" 2>> "$work/errors.log"
  echo "concurrent pair $rep: probe exit $?" >> "$work/progress.log"
done

step "xferd run on every GPU for ${run_s} s, concurrent groups every 20 s"
cat > "$work/xferd.toml" <<EOF
[probe]
interval = "10s"
concurrent_interval = "20s"
max_duty_cycle = 0.05
gpus = [$(printf '"%s",' "${gpu_list[@]}" | sed 's/,$//')]
[daemon]
state_dir = "$work/state"
EOF
[ "$simulate" = 1 ] && printf '[simulate]\ntime_scale = 0\n' >> "$work/xferd.toml"
"$b/xferd" run "${sim[@]}" -c "$work/xferd.toml" --web.listen-address 127.0.0.1:0 \
  > "$work/xferd_run.log" 2>&1 &
daemon=$!
sleep "$run_s"
# Port 0: the kernel picked a free one; the log says which.
port=$(sed -n 's|.*serving http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$work/xferd_run.log" | head -1)
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" \
  "http://127.0.0.1:$port/metrics" > "$work/metrics.prom"
kill -TERM "$daemon"
wait "$daemon"
echo "$?" > "$work/xferd_run.exit"

step "GPU tests on each GPU, then under compute-sanitizer memcheck"
for g in "${gpu_list[@]}"; do
  [ "$gpu" = 1 ] || break
  timeout 600 "$b/tests/xferd_gpu_tests" --gpu "$g" > "$work/gpu_tests_gpu$g.log" 2>&1
  echo "$?" > "$work/gpu_tests_gpu$g.exit"
  if command -v compute-sanitizer > /dev/null; then
    timeout 600 compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$b/tests/xferd_gpu_tests" --gpu "$g" --gtest_filter='-*Bandwidth*:*Concurrent*' \
      > "$work/memcheck_gpu$g.log" 2>&1
    echo "$?" > "$work/memcheck_gpu$g.exit"
  fi
done

step summary
python3 "$here/summarize_multi_gpu.py" "$work" --json "$out/summary.json" | tee "$out/summary.txt"
status=${PIPESTATUS[0]}
tar -C "$work" -czf "$out/multi_gpu.tar.gz" .
exit "$status"
