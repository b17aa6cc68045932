#!/usr/bin/env bash
# Install what is missing, build, and run every test that this machine can run.
#
#   ./tests/run.sh              deps + build + all tests (GPU tests skip without a GPU)
#   ./tests/run.sh --no-deps    skip the package step (no root needed)
#   ./tests/run.sh --sanitizers also run the CPU suite under ASan+UBSan and under TSan
#
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

deps=1 sanitizers=0
for arg in "$@"; do
  case "$arg" in
    --no-deps) deps=0 ;;
    --sanitizers) sanitizers=1 ;;
    *) echo "run.sh: unknown argument '$arg' (use --no-deps, --sanitizers)" >&2; exit 64 ;;
  esac
done

if [[ $deps -eq 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then ./deploy/install-deps.sh
  else sudo ./deploy/install-deps.sh; fi
fi

jobs=${JOBS:-$(nproc)}
build=${BUILD_DIR:-build}

configure_build() {  # DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  grep -E '^-- xferd:' "$dir.configure.log" || true
  cmake --build "$dir" -j "$jobs"
}

mkdir -p "$build"
configure_build "$build"
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900)

if [[ $sanitizers -eq 1 ]]; then
  # CPU suites only (no CUDA backend): unit and integration tests under each sanitizer,
  # without the deployment tests (label `deploy`: package, systemd container, rules,
  # dashboards, fleets), which the normal pass runs.
  for san in address thread; do
    dir="$build-$san"
    mkdir -p "$dir"
    configure_build "$dir" -DXFERD_SANITIZE=$san -DXFERD_CUDA=OFF -DXFERD_BENCH=OFF
    (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS=halt_on_error=1 \
      ctest --output-on-failure -j "$jobs" --timeout 900 -LE "gpu|deploy")
  done
fi
