#!/usr/bin/env bash
# Soak test (issue 6): run xferd on the simulated device for >= 10,000 probe cycles at a fast
# interval with scrapes running, and compare resident memory, open file descriptors and
# threads after warm-up against the end. Not part of the regular test run: it takes minutes.
#
#   tests/soak.sh [path/to/xferd]          (default: build/xferd)
#   CYCLES=10000 WARMUP=1000 INTERVAL=10ms SCRAPERS=2 tests/soak.sh build/xferd
#
# Exits 1 when RSS grew by more than 1 MiB, or fds or threads grew.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-build/xferd}
cycles=${CYCLES:-10000}
warmup=${WARMUP:-1000}
interval=${INTERVAL:-10ms}
scrapers=${SCRAPERS:-2}
[[ -x $bin ]] || { echo "soak: no xferd binary at $bin (build first, or pass its path)" >&2; exit 64; }

dir=$(mktemp -d)
pid=""
scraper_pids=()
stop_scrapers() {
  for p in "${scraper_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${scraper_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  scraper_pids=()
}
cleanup() {
  stop_scrapers
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

# Small transfers keep each simulated probe far inside the short deadline the fast
# interval allows; every mode and direction still runs (13 probes a cycle).
cat > "$dir/xferd.toml" <<EOF
[probe]
interval = "$interval"
jitter = 0
sizes = ["64KiB"]
iterations = 20
max_duty_cycle = 1.0

[daemon]
textfile_path = "$dir/xferd.prom"

[simulate]
enabled = true
time_scale = 0
EOF

"$bin" run --config "$dir/xferd.toml" --web.listen-address 127.0.0.1:0 \
  --state-dir "$dir/state" --log.level warn >"$dir/xferd.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 100); do
  # The port is only logged at info; ask the kernel which port the process listens on.
  port=$(ss -ltnpH 2>/dev/null | awk -v p="pid=$pid," '$0 ~ p {n=split($4,a,":"); print a[n]; exit}')
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "soak: xferd did not start listening:" >&2; cat "$dir/xferd.log" >&2; exit 1; }
url=http://127.0.0.1:$port/metrics

cycles_done() {
  curl -sf "$url" | awk '/^xferd_cycles_total\{/ {s += $NF} END {printf "%d\n", s}'
}
start_scrapers() {
  for _ in $(seq "$scrapers"); do
    (while :; do curl -sf -o /dev/null "$url" || true; sleep 0.05; done) &
    scraper_pids+=($!)
  done
}
# Measured with the scrapers paused, so an in-flight connection is not counted as growth.
measure() {  # -> "rss_kib fds threads"
  stop_scrapers
  sleep 0.5
  local rss fds threads
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  threads=$(ls "/proc/$pid/task" | wc -l)
  start_scrapers
  echo "$rss $fds $threads"
}
wait_cycles() {  # N
  while :; do
    kill -0 "$pid" 2>/dev/null || { echo "soak: xferd died:" >&2; tail -20 "$dir/xferd.log" >&2; exit 1; }
    local n; n=$(cycles_done || echo 0)
    [[ $n -ge $1 ]] && { echo "$n"; return; }
    sleep 1
  done
}

t0=$(date +%s)
start_scrapers
echo "soak: xferd pid $pid on $url; interval $interval; $scrapers scrapers; warm-up $warmup cycles"
wait_cycles "$warmup" >/dev/null
read -r rss0 fds0 threads0 < <(measure)
echo "soak: after warm-up: RSS ${rss0} KiB, fds $fds0, threads $threads0"
n=$(wait_cycles "$cycles")
read -r rss1 fds1 threads1 < <(measure)
t1=$(date +%s)
errors=$(curl -sf "$url" | awk '/^xferd_probe_runs_total\{.*result="(error|timeout)"/ {s += $NF} END {printf "%d\n", s}')
echo "soak: after $n cycles ($((t1 - t0)) s): RSS ${rss1} KiB, fds $fds1, threads $threads1"
echo "soak: RSS growth $((rss1 - rss0)) KiB (limit 1024); fds $fds0 -> $fds1; threads $threads0 -> $threads1; probe errors+timeouts $errors"
grep -E ' (error|critical) ' "$dir/xferd.log" | head -5 || true

fail=0
(( rss1 - rss0 > 1024 )) && { echo "soak: FAIL: resident memory grew by more than 1 MiB"; fail=1; }
(( fds1 > fds0 )) && { echo "soak: FAIL: open file descriptors grew"; fail=1; }
(( threads1 > threads0 )) && { echo "soak: FAIL: threads grew"; fail=1; }
(( fail == 0 )) && echo "soak: PASS"
exit $fail
