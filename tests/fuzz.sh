#!/usr/bin/env bash
# Fuzz the parsers: build the libFuzzer targets with clang (ASan + UBSan) and run them for a
# bounded time: the TOML config parser for half of it, the web-config YAML loader and the
# HTTP server (raw requests over loopback) for a quarter each. Exits non-zero on a finding; the input is kept under
# $FUZZ_BUILD_DIR/fuzz-artifacts/ and can be replayed with: <fuzzer> <file>.
#
#   ./tests/fuzz.sh [SECONDS]     total, default 60
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 3 ]] ||
  { echo "fuzz.sh: SECONDS must be a whole number >= 3, got '$seconds'" >&2; exit 64; }
dir=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc)}

mkdir -p "$dir"
generator=()  # Ninja for a new build directory where it is installed, as tests/run.sh
[[ ! -f $dir/CMakeCache.txt ]] && command -v ninja > /dev/null && generator=(-GNinja)
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_UNITY_BUILD=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DXFERD_FUZZ=ON -DXFERD_SANITIZE=address -DXFERD_CUDA=OFF -DXFERD_TESTS=OFF -DXFERD_BENCH=OFF \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "$jobs" --target config_fuzzer web_config_fuzzer http_fuzzer

artifacts="$dir/fuzz-artifacts"
mkdir -p "$artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fuzz() {  # TARGET SECONDS SEED... : the seeds stay as they are, libFuzzer grows a copy
  local target=$1 time=$2; shift 2
  mkdir -p "$scratch/$target"
  cp "$@" "$scratch/$target/"
  echo "fuzz.sh: $target for ${time}s ($# seeds)"
  local status=0
  "$dir/fuzz/$target" "$scratch/$target" -max_total_time="$time" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" ||
    status=$?
  ((status == 0)) && return 0
  # A finding fails the run. Replaying its input says whether it is one input's (a bug to
  # fix from the file) or a race that needs the fuzzer's run around it (the HTTP server's
  # threads): both are findings, the second harder to reproduce.
  local found
  found=$(ls -t "$artifacts"/crash-* "$artifacts"/timeout-* "$artifacts"/leak-* \
    "$artifacts"/oom-* 2>/dev/null | head -1 || true)
  if [[ -n $found ]]; then
    local again=0
    for _ in 1 2 3; do "$dir/fuzz/$target" "$found" > /dev/null 2>&1 || again=$((again + 1)); done
    echo "fuzz.sh: $target found $found; replayed alone 3 times, it failed $again of 3" >&2
  fi
  exit "$status"
}

dict=(-dict=fuzz/config.dict)
fuzz config_fuzzer $((seconds / 2)) deploy/xferd.toml tests/data/bad-configs/*.toml
dict=()
fuzz web_config_fuzzer $((seconds / 4)) tests/data/web-configs/*.yml \
  tests/data/bad-web-configs/*.yml
fuzz http_fuzzer $((seconds - seconds / 2 - seconds / 4)) fuzz/http-seeds/*.txt
echo "fuzz.sh: no findings in ${seconds}s"
