#!/usr/bin/env bash
# Fuzz the config parser: build the libFuzzer target with clang (ASan + UBSan) and run it
# for a bounded time. Exits non-zero on a finding; the crashing input is kept under
# $FUZZ_BUILD_DIR/fuzz-artifacts/ and can be replayed with: <fuzzer> <file>.
#
#   ./tests/fuzz.sh [SECONDS]     default 60
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 64; }
dir=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc)}

mkdir -p "$dir"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DXFERD_FUZZ=ON -DXFERD_SANITIZE=address -DXFERD_CUDA=OFF -DXFERD_TESTS=OFF -DXFERD_BENCH=OFF \
  >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "$jobs" --target config_fuzzer

# The seeds stay as they are: libFuzzer grows a scratch copy.
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp deploy/xferd.toml "$corpus/"
cp tests/data/bad-configs/*.toml "$corpus/"
artifacts="$dir/fuzz-artifacts"
mkdir -p "$artifacts"

echo "fuzz.sh: fuzzing the config parser for ${seconds}s (seeds: $(ls "$corpus" | wc -l) files)"
"$dir/fuzz/config_fuzzer" "$corpus" -dict=fuzz/config.dict -max_total_time="$seconds" \
  -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/"
echo "fuzz.sh: no findings in ${seconds}s"
