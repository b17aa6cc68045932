#!/usr/bin/env bash
# Install what is missing, build, and start xferd in the foreground: on the GPUs when an
# NVIDIA driver and GPU are present, else on the simulated device (said in its output).
#
#   ./deploy/quickstart.sh [extra `xferd run` flags]
#
# It installs only what building and running the daemon needs (deploy/install-deps.sh; the
# test tools are tests/run.sh's) and builds only the daemon, the quickest way the build
# allows: Ninja, a unity build, optimised without debug info, ccache when installed, and
# for CUDA only the GPUs this machine has.
#
# Flags given here win over the script's own choices (--config deploy/xferd.toml,
# --state-dir, --web.listen-address), e.g.
#   ./deploy/quickstart.sh --web.listen-address 127.0.0.1:19742
# Environment: XFERD_LISTEN (default 127.0.0.1:9742) and XFERD_STATE_DIR (default
# ./.xferd-state) set the same defaults; BUILD_DIR (default build-quickstart) the build
# directory; XFERD_BINARY an xferd already built or installed (then nothing is installed
# or built).
#
# Then: curl -s localhost:9742/metrics | grep ^xferd_   (Ctrl-C stops it)
set -euo pipefail
cd "$(dirname "$0")/.."

extra=("$@")

# Whether the extra flags set FLAG (any of the given spellings), as "FLAG VALUE" or "FLAG=VALUE".
given() {
  local a f
  for a in "${extra[@]}"; do
    for f in "$@"; do [[ $a == "$f" || $a == "$f="* ]] && return 0; done
  done
  return 1
}

# The value the extra flags give FLAG (the last one, as xferd would see it), or "".
given_value() {
  local flag=$1 value="" i
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case "${extra[i]}" in
      "$flag") value=${extra[i + 1]:-} ;;
      "$flag="*) value=${extra[i]#*=} ;;
    esac
  done
  printf '%s' "$value"
}

# Each step says how long it took (README, "Set up": where the time goes).
started=$SECONDS
took() { echo "quickstart: $1 took $((SECONDS - $2)) s (total $((SECONDS - started)) s)"; }

if [[ -n ${XFERD_BINARY:-} ]]; then
  xferd=$XFERD_BINARY
else
  t=$SECONDS
  if [[ $(id -u) -eq 0 ]]; then ./deploy/install-deps.sh
  else sudo ./deploy/install-deps.sh; fi
  took "installing the packages" "$t"
  build=${BUILD_DIR:-build-quickstart}
  # -O1 without debug info, the quickest to compile (the xferd target, unity: 90 s of CPU
  # at -O1, 118 s at -O2, 136 s at -O3, and -g triples a unit's time); the daemon spends its
  # time waiting, not computing. tests/run.sh builds RelWithDebInfo.
  configure=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
             -DCMAKE_UNITY_BUILD=ON -DXFERD_TESTS=OFF -DXFERD_BENCH=OFF)
  # A new build directory gets Ninja (installed with the rest); an existing one keeps its
  # generator.
  [[ -f $build/CMakeCache.txt ]] || configure+=(-GNinja)
  # With an NVIDIA driver here, the CUDA backend is built as CMakeLists.txt's XFERD_CUDA
  # does it (when CMake finds nvcc), for this machine's GPUs only: their compute capability,
  # as SASS and PTX, one nvcc pass instead of one per architecture of the default list.
  # Without a driver xferd serves on the simulated device, which needs no CUDA: nvcc's
  # time (minutes on 2 cores) is skipped.
  if [[ -e /proc/driver/nvidia/version ]] || nvidia-smi -L > /dev/null 2>&1; then
    configure+=(-DXFERD_CUDA=ON)
    if caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null) &&
      [[ -n $caps ]]; then
      configure+=("-DCMAKE_CUDA_ARCHITECTURES=$(tr -d '. ' <<< "$caps" | sort -u | paste -sd ';')")
    fi
  else
    configure+=(-DXFERD_CUDA=OFF)
    echo "quickstart: no NVIDIA driver here: building xferd for the simulated device only"
  fi
  t=$SECONDS
  mkdir -p "$build"
  cmake -S . -B "$build" "${configure[@]}" > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
  grep -E '^-- xferd:' "$build/configure.log" || true
  took configuring "$t"
  t=$SECONDS
  cmake --build "$build" -j "$(nproc)" --target xferd
  took "building xferd" "$t"
  xferd=$build/xferd
fi

args=(run)
given -c --config || args+=(--config deploy/xferd.toml)
if ! given --state-dir; then
  state=${XFERD_STATE_DIR:-$PWD/.xferd-state}
  mkdir -p "$state"
  args+=(--state-dir "$state")
fi
listen=${XFERD_LISTEN:-127.0.0.1:9742}
if given --web.listen-address; then
  listen=$(given_value --web.listen-address)
else
  args+=(--web.listen-address "$listen")
fi
if ! given --simulate; then
  # One small pinned probe tells whether a usable GPU is there (exit 69: no driver / GPU).
  rc=0
  "$xferd" probe --mode pinned --size 1MiB --iterations 1 --warmup 0 >/dev/null 2>&1 || rc=$?
  if [[ $rc -eq 69 ]]; then
    echo "quickstart: no NVIDIA driver / GPU here: starting xferd on the simulated device"
    args+=(--simulate)
  fi
fi
args+=("${extra[@]}")
echo "quickstart: xferd ${args[*]}"
echo "quickstart: metrics at http://${listen}/metrics"
exec "$xferd" "${args[@]}"
