#!/usr/bin/env bash
# Install what is missing, build, and start xferd in the foreground: on the GPUs when an
# NVIDIA driver and GPU are present, else on the simulated device (said in its output).
#
#   ./deploy/quickstart.sh [extra `xferd run` flags]
#
# Then: curl -s localhost:9742/metrics | grep ^xferd_   (Ctrl-C stops it)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -eq 0 ]]; then ./deploy/install-deps.sh
else sudo ./deploy/install-deps.sh; fi

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target xferd

state=${XFERD_STATE_DIR:-$PWD/.xferd-state}
mkdir -p "$state"
args=(run --config deploy/xferd.toml --state-dir "$state"
      --web.listen-address "${XFERD_LISTEN:-127.0.0.1:9742}")
# One small pinned probe tells whether a usable GPU is there (exit 69: no driver / GPU).
rc=0
"$build/xferd" probe --mode pinned --size 1MiB --iterations 1 --warmup 0 >/dev/null 2>&1 || rc=$?
if [[ $rc -eq 69 ]]; then
  echo "quickstart: no NVIDIA driver / GPU here: starting xferd on the simulated device"
  args+=(--simulate)
fi
echo "quickstart: xferd ${args[*]}"
echo "quickstart: metrics at http://${XFERD_LISTEN:-127.0.0.1:9742}/metrics"
exec "$build/xferd" "${args[@]}" "$@"
