#!/usr/bin/env bash
# Install the Debian/Ubuntu packages xferd needs. Idempotent: packages already present are
# left alone, and the script says what it installs.
#
#   deploy/install-deps.sh            what building and running the daemon needs (the quick
#                                     start: a compiler, CMake, Ninja and the libraries)
#   deploy/install-deps.sh --test     also what the tests, the package and CI need
#                                     (tests/run.sh: GoogleTest, pytest, Prometheus, ...)
#   deploy/install-deps.sh --bench    --test, and the peers the benchmarks compare against
#   deploy/install-deps.sh --list [--test|--bench]   print the packages, install nothing
set -euo pipefail

# Building the daemon (`cmake --build BUILD --target xferd`) and running it.
build=(cmake ninja-build g++ pkg-config
       prometheus-cpp-dev libspdlog-dev libfmt-dev libsystemd-dev libcli11-dev
       libtomlplusplus-dev nlohmann-json3-dev libyaml-cpp-dev libmicrohttpd-dev libgnutls28-dev
       libcrypt-dev zlib1g-dev)
# Every other target (tests, benchmarks, fuzzers, the .deb) and what the tests start.
test=(make git ca-certificates ccache libgtest-dev libgmock-dev libbenchmark-dev
      python3 python3-pytest python3-yaml curl openssl procps systemd prometheus
      prometheus-node-exporter
      clang libclang-rt-14-dev
      dpkg-dev file   # cpack's .deb: dpkg-shlibdeps computes Depends, file finds the ELF files
      mmdebstrap systemd-container util-linux   # the unit and .deb under a booted systemd
      slurm-wlm munge   # the Slurm health check drains a real slurmd (tests/integration/test_slurm.py)
      chromium)  # headless, the status page's browser test (tests/integration/test_status_page.py)
bench=(wrk nginx-light)

list=0 want=("${build[@]}")
for arg in "$@"; do
  case "$arg" in
    --list) list=1 ;;
    --test) want=("${build[@]}" "${test[@]}") ;;
    --bench) want=("${build[@]}" "${test[@]}" "${bench[@]}") ;;
    *) echo "install-deps: unknown argument '$arg' (use --test, --bench, --list)" >&2; exit 64 ;;
  esac
done
if [[ $list -eq 1 ]]; then
  printf '%s\n' "${want[@]}"
  exit 0
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#want[@]} packages already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root (or with sudo) to install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
# Packages such as prometheus and nginx start their service on install; keep them from
# doing so (tests start their own instances on free ports).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; made_policy=1
fi
trap '[[ $made_policy -eq 1 ]] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
# unsafe-io: dpkg skips its fsync per file (what Debian's container images do); a crash
# mid-install is repaired by running the script again.
install() {
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "$@"
}
# The package lists: fetched when there are none or they are a day old, or when the install
# cannot find a package in them (on a fresh machine, fetching them is a good part of the
# time this takes).
lists=/var/lib/apt/lists
if [[ -z $(find "$lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit 2>/dev/null) ]]; then
  apt-get update -qq
  install "${missing[@]}"
elif ! install "${missing[@]}"; then
  apt-get update -qq
  install "${missing[@]}"
fi
echo "install-deps: done"
