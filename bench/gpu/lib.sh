# shellcheck shell=bash
# Sourced first by the scripts of bench/gpu, which run from the repository root:
#
#   # shellcheck source=bench/gpu/lib.sh
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# What each of them would otherwise write again: the bundle's programs and the folder for
# their output, a temporary folder with the daemon the script starts ended on exit, the
# head of a daemon's config, a GET. Sourcing it sets -u and pipefail, as every script here
# runs (no -e: a failed step is written down and the script goes on to the next).
set -uo pipefail

# use_bundle OUT_DIR: makes OUT_DIR, and takes the programs of the bundle made on the build
# machine (XFERD_BUNDLE, default .devbundle; bench/gpu/README.md says how): sources its
# env.sh (the libraries the GPU host lacks) and sets bundle and b, the folder of its built
# programs.
use_bundle() {
  mkdir -p "$1"
  bundle=${XFERD_BUNDLE:-.devbundle}
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
  # shellcheck disable=SC2034  # used by the scripts that source this
  b=$bundle/build
}

# daemon_workspace PORT: sets work, a new temporary folder; port, where the script's daemon
# listens on loopback; and pid, that daemon's, empty until the script starts it (the script
# sets it back to empty once it has ended it). On exit that daemon is sent SIGTERM and
# waited for, and the folder removed.
daemon_workspace() {
  work=$(mktemp -d)
  # shellcheck disable=SC2034  # used by the scripts that source this
  port=$1
  pid=""
  trap end_daemon_workspace EXIT
}
end_daemon_workspace() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"
  rm -rf "$work"
}

# xferd_toml PORT STATE_DIR < SECTIONS: a daemon config on stdout, serving on 127.0.0.1:PORT
# with its state in STATE_DIR, followed by the sections read from stdin ([probe], ...).
xferd_toml() {
  printf '[web]\nlisten_address = "127.0.0.1:%s"\n[daemon]\nstate_dir = "%s"\n' "$1" "$2"
  cat
}

# http_get URL: the body of a GET on stdout (10 s timeout); fails where the request does.
http_get() {
  python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"
}
