#!/usr/bin/env bash
# The daemon's idle cost: xferd run --simulate with the shipped defaults (one simulated GPU,
# a cycle a minute), no request for SECONDS; prints the CPU it used (utime + stime from
# /proc/PID/stat) as a share of one core, its VmRSS at the end and the cycles it ran.
#
#   bench/idle_cost.sh [XFERD [SECONDS]]      (defaults: build/xferd, 300)
#
# The budget: at most 0.1 % of a core, RSS at most 32 MiB (docs/performance.md). Loopback
# only; the daemon it starts is stopped at the end.
set -euo pipefail
xferd=${1:-build/xferd}
secs=${2:-300}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$xferd" run --simulate --web.listen-address 127.0.0.1:0 --state-dir "$dir/state" \
  > "$dir/log" 2>&1 &
pid=$!
sleep 10  # past the start and the first cycle
tick=$(getconf CLK_TCK)
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
sleep "$secs"
read -r u2 s2 < <(awk '{print $14, $15}' "/proc/$pid/stat")
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
cycles=$(grep -c "cycle [0-9]*:" "$dir/log" || true)
kill "$pid"
wait "$pid" || true
ticks=$(( (u2 - u1) + (s2 - s1) ))
awk -v t="$ticks" -v hz="$tick" -v s="$secs" -v rss="$rss" -v c="$cycles" 'BEGIN {
  printf "%d s idle: %.2f s of CPU = %.3f %% of a core; VmRSS %.1f MiB; %d cycles\n",
         s, t / hz, 100 * t / hz / s, rss / 1024, c }'
