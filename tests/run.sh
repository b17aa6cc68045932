#!/usr/bin/env bash
# Install what is missing, build, and run every test that this machine can run.
#
#   ./tests/run.sh              deps + build + all tests (GPU tests skip without a GPU)
#   ./tests/run.sh --no-deps    skip the package step (no root needed)
#   ./tests/run.sh --sanitizers the unit and integration tests under ASan+UBSan, and in the
#                               plain build only what that skips (GPU, deploy, timing)
#   ./tests/run.sh --tsan       as --sanitizers, and the unit tests under TSan too
#
# Environment: BUILD_DIR (default build), JOBS (default: number of cores), UNITY (default 1:
# unity builds, CMAKE_UNITY_BUILD, which compile each folder in a few large units: about a
# third of the time of one object per file, what keeps CI's three builds on 2 cores in its
# time; UNITY=0 builds one object per file, for quick rebuilds while editing).
set -euo pipefail
cd "$(dirname "$0")/.."

deps=1 sanitizers=0 tsan=0
for arg in "$@"; do
  case "$arg" in
    --no-deps) deps=0 ;;
    --sanitizers) sanitizers=1 ;;
    --tsan) sanitizers=1 tsan=1 ;;
    *) echo "run.sh: unknown argument '$arg' (use --no-deps, --sanitizers, --tsan)" >&2; exit 64 ;;
  esac
done

if [[ $deps -eq 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then ./deploy/install-deps.sh --test
  else sudo ./deploy/install-deps.sh --test; fi
fi

jobs=${JOBS:-$(nproc)}
build=${BUILD_DIR:-build}
unity=ON
[[ ${UNITY:-1} == 0 ]] && unity=OFF
started=$SECONDS

# Each phase says how long it took: CI has a time limit, and this is where it goes.
phase() { echo "run.sh: $1 took $((SECONDS - $2)) s (total $((SECONDS - started)) s)"; }

# Ninja for a new build directory where it is installed: it starts a folder's objects while
# the folders below it still link, where Make waits for them (with unity builds, one
# folder is one or two objects, so Make would keep one core idle most of the time).
generator_for() {  # DIR
  [[ ! -f $1/CMakeCache.txt ]] && command -v ninja > /dev/null && echo "-GNinja"
  return 0
}

configure_build() {  # DIR [cmake args...]
  local dir=$1 t=$SECONDS; shift
  # shellcheck disable=SC2046  # an empty word or one flag
  cmake -S . -B "$dir" $(generator_for "$dir") -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_UNITY_BUILD=$unity "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  grep -E '^-- xferd:' "$dir.configure.log" || true
  cmake --build "$dir" -j "$jobs"
  phase "building $dir" "$t"
}

run_tests() {  # DIR [ctest args...]
  local dir=$1 t=$SECONDS; shift
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 900 "$@")
  phase "the tests in $dir" "$t"
}

mkdir -p "$build"
configure_build "$build"
if [[ $sanitizers -eq 1 ]]; then
  # The unit and daemon tests run below under the sanitizers, which find more than this
  # build can; here, once, what those passes skip (GPU, deployment, minutes-long timing, the
  # benchmarks' own checks) and
  # the source checks (layering, one-line messages, the names the docs use).
  run_tests "$build" -L "gpu|deploy|timing|bench"
  run_tests "$build" -R '^(layers|messages|docs)\.'
else
  run_tests "$build"
fi

# One sanitizer pass: CPU suites only (no CUDA backend), without the deployment tests
# (label `deploy`: package, systemd container, rules, dashboards, fleets) and the
# minutes-long simulations (label `timing`), which the normal pass runs (tests/CMakeLists.txt
# says why). -O1 -g1: what the sanitizers advise, line tables for their reports, and half
# the compile time of -O2 -g. The unit tests run in one process: one process per test, as
# CTest starts them, spends most of its time starting up under a sanitizer (the 431 unit
# tests took 50 s in one process under ASan; the phase line below prints it).
sanitizer_pass() {  # SANITIZER [LABELS: integration tests too when "integration"]
  local san=$1 dir="$build-$1" t
  mkdir -p "$dir"
  configure_build "$dir" -DXFERD_SANITIZE="$san" -DXFERD_CUDA=OFF -DXFERD_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  t=$SECONDS
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS=halt_on_error=1 \
    ./tests/xferd_unit_tests --gtest_brief=1)
  phase "the unit tests in $dir" "$t"
  if [[ ${2:-} == integration ]]; then
    ASAN_OPTIONS=detect_leaks=1 run_tests "$dir" -L integration -LE "gpu|deploy|timing"
  fi
}

if [[ $sanitizers -eq 1 ]]; then
  # ASan+UBSan: the unit and the daemon's integration tests. TSan (--tsan): the unit tests,
  # which hold the threaded code (server, scheduler, service, probe runner); left out of CI,
  # whose 30 minutes on 2 cores a third build would leave too little margin (README, "Set up").
  sanitizer_pass address integration
  if [[ $tsan -eq 1 ]]; then sanitizer_pass thread; fi
fi
echo "run.sh: every test passed in $((SECONDS - started)) s"
