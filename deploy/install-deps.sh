#!/usr/bin/env bash
# Install the Debian/Ubuntu packages xferd needs to build and test. Idempotent: packages
# already present are left alone, and the script says what it installs.
#
#   deploy/install-deps.sh            build + test dependencies
#   deploy/install-deps.sh --bench    also the peers the benchmarks compare against
set -euo pipefail

build=(cmake make ninja-build g++ pkg-config git ca-certificates
       prometheus-cpp-dev libspdlog-dev libfmt-dev libsystemd-dev libcli11-dev
       libtomlplusplus-dev nlohmann-json3-dev libyaml-cpp-dev libmicrohttpd-dev libgnutls28-dev libcrypt-dev zlib1g-dev
       libgtest-dev libgmock-dev libbenchmark-dev ccache)
test=(python3 python3-pytest python3-yaml curl openssl procps systemd prometheus prometheus-node-exporter
      clang libclang-rt-14-dev
      dpkg-dev file   # cpack's .deb: dpkg-shlibdeps computes Depends, file finds the ELF files
      mmdebstrap systemd-container util-linux)  # the unit and .deb under a booted systemd
bench=(wrk nginx-light)

want=("${build[@]}" "${test[@]}")
[[ "${1:-}" == "--bench" ]] && want+=("${bench[@]}")

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
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
