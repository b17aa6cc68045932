#!/usr/bin/env bash
# How long deploy/quickstart.sh takes from a fresh clone until /metrics answers: the
# figure in the README's "Set up". Prints the script's own step lines and the total.
#
#   bench/quickstart_time.sh                a fresh clone of HEAD, with the packages as
#                                           they are on this machine
#   bench/quickstart_time.sh --fresh-root   the same in a fresh Debian 12 root
#                                           (mmdebstrap --variant=minbase bookworm, made
#                                           first and not timed), entered with chroot: the
#                                           packages installed from the network are timed
#                                           too; needs root, mmdebstrap and the network
#
# The compiler cache is off (CCACHE_DISABLE=1): a fresh machine has none. WORK (default: a
# new temporary directory, removed at the end unless KEEP=1) holds the clone (and the root).
set -euo pipefail
fresh_root=0
for arg in "$@"; do
  case "$arg" in
    --fresh-root) fresh_root=1 ;;
    *) echo "quickstart_time: unknown argument '$arg' (use --fresh-root)" >&2; exit 64 ;;
  esac
done
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-$(mktemp -d /var/tmp/xferd-quickstart.XXXXXX)}
mkdir -p "$work"
cleanup() {
  if [[ -n ${runner:-} ]]; then
    # unshare --fork ignores SIGTERM while it waits; killed, it hands its child (the chroot's
    # xferd) SIGTERM (--kill-child).
    kill "-$([[ $fresh_root -eq 1 ]] && echo KILL || echo TERM)" "$runner" 2> /dev/null || true
    wait "$runner" 2> /dev/null || true
  fi
  [[ ${KEEP:-0} == 1 ]] && return
  # The root's mounts lived in the runner's own namespace; never remove through one.
  if grep -q " $work/" /proc/self/mounts; then
    echo "quickstart_time: something is still mounted under $work; left in place" >&2
    return
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [[ $fresh_root -eq 1 ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "quickstart_time: --fresh-root needs root" >&2; exit 77; }
  root=$work/root
  echo "quickstart_time: making a fresh Debian 12 root (not timed)"
  mmdebstrap --quiet --variant=minbase bookworm "$root" > "$work/mmdebstrap.log" 2>&1 ||
    { tail -20 "$work/mmdebstrap.log"; exit 1; }
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  clone=$root/root/xferd
  inside=/root/xferd
else
  clone=$work/xferd
  inside=$clone
fi
git clone -q "$source_dir" "$clone"
echo "quickstart_time: clone of $(git -C "$clone" rev-parse --short HEAD) at $clone; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

command=(env CCACHE_DISABLE=1 XFERD_LISTEN="127.0.0.1:$port" "$inside/deploy/quickstart.sh")
started=$(date +%s.%N)
if [[ $fresh_root -eq 1 ]]; then
  # A mount namespace of its own, so the mounts go with it; the xferd it starts ends with it.
  unshare --mount --fork --kill-child=SIGTERM bash -c '
    root=$1; shift
    mount --make-rprivate /
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    mount -t tmpfs tmpfs "$root/tmp"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root "$@"' bash "$root" "${command[@]}" > "$work/quickstart.log" 2>&1 &
else
  "${command[@]}" > "$work/quickstart.log" 2>&1 &
fi
runner=$!
until python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=2)" 2> /dev/null; do
  if ! kill -0 "$runner" 2> /dev/null; then
    tail -30 "$work/quickstart.log"
    echo "quickstart_time: the quick start exited before /metrics answered" >&2
    exit 1
  fi
  sleep 0.2
done
elapsed=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
grep -E '^quickstart: ' "$work/quickstart.log" || true
echo "quickstart_time: /metrics answered $elapsed s after the start (load $(cut -d' ' -f1-3 /proc/loadavg))"
