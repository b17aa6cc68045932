#!/usr/bin/env bash
# xferd beside a copy workload on the GPU host, in one call: what the daemon costs the
# workload's throughput, whether it keeps its cadence, and whether it ever calls a shared
# link degraded or learns a baseline from a contended probe; once with the default config
# and once with busy detection off.
#
#   bench/gpu/contention_run.sh OUT_DIR
#
# Foreground, or in the background (it outlasts one shell command):
#   setsid nohup bench/gpu/contention_run.sh OUT_DIR > /dev/null 2>&1 < /dev/null &
# then watch OUT_DIR/progress.log; OUT_DIR/done holds the exit status once it has ended.
#
# Phases (lengths in seconds from the environment, defaults in brackets):
#   R1  `xferd probe --json` alone: every mode's uncontended figure (R1_probe.json)
#   A   the workload alone, steady                                          ALONE_S [60]
#   B   a fresh `xferd run` with deploy/xferd.toml as shipped (fresh state dir, listening
#       on 127.0.0.1 at a free port, --log.level info); the workload starts
#       WORKLOAD_DELAY_S [1] after it, steady for the first half, in bursts for the
#       second (bench/gpu/workload.cu); /metrics scraped every SCRAPE_S [15]  DAEMON_S [600]
#   C   the workload alone, steady, again                                   ALONE_S
#   D   as B, with `[busy] enabled = false` in a copy of the config        NOBUSY_S [240]
#   R2  `xferd probe --json` alone again (R2_probe.json)
# then bench/gpu/summarize_contention.py OUT_DIR writes summary.txt and summary.json.
# With the defaults it takes about 17 minutes (2 x ALONE_S + DAEMON_S + NOBUSY_S + ~40 s).
#
# Other settings: GPU [0] (the workload's GPU; the daemon probes what its config says),
# WORKLOAD_SIZE [64MiB], WORKLOAD_DIRECTION [h2d], BURST_SEED [1], XFERD_CONFIG
# [deploy/xferd.toml]. Programs come from the bundle made on the build machine
# (XFERD_BUNDLE, default .devbundle; its build/ holds xferd and bench/gpu/xferd_workload),
# or from XFERD_BUILD, a build directory. XFERD_SIMULATE=1 runs the daemon on its
# simulated device, to try the script on a machine without a GPU (the workload phases
# then say why they could not run).
set -uo pipefail
out=${1:?usage: contention_run.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
if [ -e "$out/progress.log" ]; then
  echo "contention_run.sh: $out already holds a run (progress.log); give a new directory" >&2
  exit 64
fi

alone_s=${ALONE_S:-60}
daemon_s=${DAEMON_S:-600}
nobusy_s=${NOBUSY_S:-240}
scrape_s=${SCRAPE_S:-15}
delay_s=${WORKLOAD_DELAY_S:-1}
gpu=${GPU:-0}
size=${WORKLOAD_SIZE:-64MiB}
direction=${WORKLOAD_DIRECTION:-h2d}
seed=${BURST_SEED:-1}
config=${XFERD_CONFIG:-deploy/xferd.toml}
simulate=${XFERD_SIMULATE:-0}
for v in alone_s daemon_s nobusy_s scrape_s delay_s; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "contention_run.sh: $v must be whole seconds, not '${!v}'" >&2; exit 64; }
done
(( daemon_s >= 4 && nobusy_s >= 4 )) || { echo "contention_run.sh: DAEMON_S and NOBUSY_S must be >= 4" >&2; exit 64; }
[ -r "$config" ] || { echo "contention_run.sh: cannot read the config $config" >&2; exit 66; }

if [ -n "${XFERD_BUILD:-}" ]; then
  b=$XFERD_BUILD
else
  bundle=${XFERD_BUNDLE:-.devbundle}
  # shellcheck disable=SC1091
  [ -r "$bundle/env.sh" ] && . "$bundle/env.sh"
  b=$bundle/build
fi
xferd=$b/xferd
workload=$b/bench/gpu/xferd_workload
[ -x "$xferd" ] || { echo "contention_run.sh: no xferd at $xferd (XFERD_BUNDLE / XFERD_BUILD)" >&2; exit 66; }
[ -x "$workload" ] || { echo "contention_run.sh: no xferd_workload at $workload (build target xferd_workload)" >&2; exit 66; }
sim_flag=()
[ "$simulate" = 1 ] && sim_flag=(--simulate)

work=$(mktemp -d)
# A private copy of the programs, their libraries, the config and the summarizer: the run
# outlasts a shell command, and the checkout or bundle may be replaced while it goes on.
mkdir -p "$work/snap/lib"
cp "$xferd" "$workload" "$here/summarize_contention.py" "$work/snap/" || exit 1
cp "$config" "$work/snap/xferd.toml" || exit 1
if [ -n "${bundle:-}" ] && [ -d "$bundle/lib" ]; then
  cp -L "$bundle"/lib/* "$work/snap/lib/" 2>/dev/null
  export LD_LIBRARY_PATH="$work/snap/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
xferd=$work/snap/xferd
workload=$work/snap/xferd_workload
summarize=$work/snap/summarize_contention.py
config_name=$config
config=$work/snap/xferd.toml

pids=()  # everything this script started and has not reaped: ended by PID on exit
finish() {
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
  echo "$rc" > "$out/done"
}
trap finish EXIT
trap 'exit 130' INT TERM
forget() { local keep=() p; for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done; pids=("${keep[@]}"); }

# Sleeps that a signal interrupts (a plain foreground sleep holds the trap until it ends).
nap() { sleep "$1" & local p=$!; pids+=("$p"); wait "$p"; forget "$p"; }
step() { echo "== $(date -u +%FT%T) $*" | tee -a "$out/progress.log"; }
note() { echo "   $*" | tee -a "$out/progress.log"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
scrape() {  # PORT FILE: appends one exposition, headed by the time it was taken
  python3 - "$1" "$2" <<'PY'
import sys, time, urllib.request
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
except Exception as e:
    body = f"# scrape failed: {e}\n"
with open(sys.argv[2], "a") as f:
    f.write(f"# scrape_time {time.time():.3f}\n{body}")
PY
}

# The workload for SECONDS into FILE_PREFIX.jsonl (stderr to FILE_PREFIX.err), in the
# background; its PID in $workload_pid.
start_workload() {  # MODE SECONDS FILE_PREFIX
  "$workload" --mode "$1" --duration "$2" --gpu "$gpu" --size "$size" --direction "$direction" \
    --seed "$seed" --out "$3.jsonl" > /dev/null 2> "$3.err" &
  workload_pid=$!
  pids+=("$workload_pid")
}
wait_workload() {  # FILE_PREFIX
  wait "$workload_pid"; local rc=$?
  forget "$workload_pid"
  echo "$rc" > "$1.rc"
  if [ "$rc" = 0 ]; then
    note "workload: $(python3 "$summarize" --workload "$1.jsonl")"
  else
    note "workload exit $rc: $(tail -n 2 "$1.err" | tr '\n' ' ')"
  fi
}

reference_probe() {  # NAME
  step "$1: xferd probe --json alone (64 MiB, 20 iterations)"
  timeout 180 "$xferd" probe "${sim_flag[@]}" --json --size 64MiB --iterations 20 \
    > "$out/$1_probe.json" 2> "$out/$1_probe.err"
  note "xferd probe exit $? (1 = something below its band or failed)"
}

alone_phase() {  # NAME
  step "$1: workload alone, steady, ${alone_s}s"
  if (( alone_s > 0 )); then
    start_workload steady "$alone_s" "$out/$1_workload"
    wait_workload "$out/$1_workload"
  fi
}

# NAME CONFIG SECONDS: a fresh daemon, the workload beside it (steady, then bursts),
# /metrics scraped every scrape_s, the daemon stopped with SIGTERM at the end.
daemon_phase() {
  local name=$1 cfg=$2 secs=$3 label=$4 port state
  port=$(free_port)
  state=$work/state-$name
  mkdir -p "$state"
  cp "$cfg" "$out/${name}_xferd.toml"
  step "$name: xferd run ($label) on 127.0.0.1:$port beside the workload, ${secs}s"
  local t0
  t0=$(date +%s.%N)
  "$xferd" run --config "$cfg" "${sim_flag[@]}" --web.listen-address "127.0.0.1:$port" \
    --state-dir "$state" --log.level info > "$out/${name}_xferd.log" 2>&1 &
  local daemon=$!
  pids+=("$daemon")
  (
    nap=
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while kill -0 "$daemon" 2>/dev/null; do
      sleep "$scrape_s" & nap=$!
      wait "$nap"
      kill -0 "$daemon" 2>/dev/null && scrape "$port" "$out/${name}_metrics.prom"
    done
  ) &
  local scraper=$!
  pids+=("$scraper")

  nap "$delay_s"
  local half=$(( secs / 2 ))
  local steady_s=$(( half > delay_s + 1 ? half - delay_s : 1 ))
  note "workload steady ${steady_s}s from $(date -u +%T), then bursts $(( secs - half ))s"
  start_workload steady "$steady_s" "$out/${name}_workload_steady"
  wait_workload "$out/${name}_workload_steady"
  start_workload bursts "$(( secs - half ))" "$out/${name}_workload_bursts"
  wait_workload "$out/${name}_workload_bursts"
  # Whatever is left of the phase (the workloads' own start-up took some of it).
  local left
  left=$(python3 -c "import sys; print(max(0.0, float(sys.argv[1]) + float(sys.argv[2]) - float(sys.argv[3])))" "$t0" "$secs" "$(date +%s.%N)")
  nap "$left"

  scrape "$port" "$out/${name}_metrics.prom"
  local t1
  t1=$(date +%s.%N)
  kill -TERM "$daemon" 2>/dev/null
  wait "$daemon"; local rc=$?
  forget "$daemon"
  kill -TERM "$scraper" 2>/dev/null; wait "$scraper" 2>/dev/null; forget "$scraper"
  [ -r "$state/state.json" ] && cp "$state/state.json" "$out/${name}_state.json"
  printf '{"start": %s, "stop": %s, "exit_code": %s, "port": %s}\n' "$t0" "$t1" "$rc" "$port" \
    > "$out/${name}_daemon.json"
  note "xferd exit $rc after SIGTERM; $(grep -c 'verdict DEGRADED' "$out/${name}_xferd.log") DEGRADED lines, $(grep -c ' cycle [0-9]*:' "$out/${name}_xferd.log") cycles logged"
}

# CONFIG OUT: the config of phase D, CONFIG with busy detection off and nothing else changed.
busy_off_config() {
  python3 - "$1" "$2" <<'PY'
import re, sys
text, section, done = open(sys.argv[1]).read().splitlines(), None, False
out = []
for line in text:
    m = re.match(r"\s*\[([^\]]+)\]\s*(#.*)?$", line)
    if m:
        if section == "busy" and not done:
            out.append("enabled = false")
            done = True
        section = m.group(1).strip()
    elif section == "busy" and re.match(r"\s*enabled\s*=", line):
        line, done = "enabled = false", True
    out.append(line)
if not done:
    out += ["", "[busy]", "enabled = false"] if section != "busy" else ["enabled = false"]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
}

main() {
  step "machine"
  {
    date -u
    uname -a
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv 2>&1
    "$xferd" version
    echo "ALONE_S=$alone_s DAEMON_S=$daemon_s NOBUSY_S=$nobusy_s SCRAPE_S=$scrape_s WORKLOAD_DELAY_S=$delay_s GPU=$gpu WORKLOAD_SIZE=$size WORKLOAD_DIRECTION=$direction BURST_SEED=$seed XFERD_CONFIG=$config_name XFERD_SIMULATE=$simulate"
    git -C "$root" log -1 --format='commit %H %s' 2>/dev/null
  } > "$out/machine.txt" 2>&1

  busy_off_config "$config" "$work/nobusy.toml" || { step "cannot derive the busy-off config"; exit 1; }
  "$xferd" check-config "$work/nobusy.toml" >> "$out/machine.txt" 2>&1 || { step "the busy-off config does not check"; exit 1; }

  reference_probe R1
  alone_phase A
  daemon_phase B "$config" "$daemon_s" "$config_name as it is"
  alone_phase C
  daemon_phase D "$work/nobusy.toml" "$nobusy_s" "$config_name with [busy] enabled = false"
  reference_probe R2

  step summary
  python3 "$summarize" "$out" | tee "$out/summary.txt"
  step "done"
}

# Bash reads a script while it runs it; main, the long part, is read whole before it runs, so a
# checkout replaced under a background run does not change what it does.
main
