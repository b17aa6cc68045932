#!/usr/bin/env bash
# The verdict's cadence on a real GPU: (1) each mode's size curve from 1 to 64 MiB and what
# each probe of the default plan costs (its size for the link, the 25 ms device-time target,
# its timed transfers); (2) `xferd run` with the shipped defaults (60 s interval,
# max_duty_cycle 0.0025, every mode at 64 MiB) for SECONDS, its status document read every
# 5 s: when each of the 13 series was first measured, the longest any waited for a reading,
# what the allowance held back, the duty cycle; and, from the same run, what the link watch
# cost (the CPU time of its thread, xferd-linkwatch, and of the whole daemon, from the
# kernel's per-thread run times) and what it counted (xferd_pcie_link_transitions_total,
# xferd_pcie_link_reduced_seconds_total, link_flapping), so one ten-minute run shows both.
#
#   bench/gpu/size_curves.sh OUT_DIR [SECONDS] [GPU]   (from the repository root; default
#   390 s and GPU 0; the whole script takes SECONDS + about 90 s)
#
# Runs the bundle made on the build machine (XFERD_BUNDLE, default .devbundle; its xferd);
# LOG_LEVEL=debug logs every probe's link window and how it was judged; SKIP_CURVES=1 runs
# the daemon part (2) only.
# Writes size_curves.md and size_curves.json (1), coverage.json, status_final.json,
# daemon.log and summary.txt (2) to OUT_DIR. What to look for: in size_curves.md, each
# link-bound probe at 8-64 MiB within a few % of its 64 MiB figure (the plateau), the
# default plan's device times (pinned ~26 ms, pageable and managed at the 5-transfer floor);
# in summary.txt, "13 of 13 series measured", each within 15 minutes, and the duty cycle
# at most 0.0025 plus the start's allowance.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: size_curves.sh OUT_DIR [SECONDS] [GPU]}
secs=${2:-390}
gpu=${3:-0}
use_bundle "$out"
daemon_workspace 19743

if [[ -z ${SKIP_CURVES:-} ]]; then
  echo "== $(date -u +%T) size curves and the default plan's costs on GPU $gpu"
  python3 bench/size_curves.py --xferd "$b/xferd" --real --gpu "$gpu" \
    --json "$out/size_curves.json" > "$out/size_curves.md" 2> "$out/size_curves.err"
  echo "size curves: exit $? ($(wc -l < "$out/size_curves.md") lines)"
fi

echo "== $(date -u +%T) xferd run, the shipped defaults, ${secs}s"
xferd_toml "$port" "$work/state" > "$work/xferd.toml" <<TOML
[probe]
gpus = ["$gpu"]
TOML
"$b/xferd" run --config "$work/xferd.toml" ${LOG_LEVEL:+--log.level "$LOG_LEVEL"} > "$out/daemon.log" 2>&1 &
pid=$!
python3 - "$port" "$secs" "$out" "$pid" <<'PY'
import glob, json, os, sys, time, urllib.request
port, secs, out, pid = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def cpu_ns():
    """Run time of the daemon's threads in ns: all of them, and the link watch's."""
    total = watch = 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            run = int(open(f"{task}/schedstat").read().split()[0])
            comm = open(f"{task}/comm").read().strip()
        except (OSError, ValueError, IndexError):
            continue
        total += run
        if comm == "xferd-linkwatch":
            watch += run
    return total, watch
cpu_start, wall_start = None, None
def status():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=10) as r:
        return json.loads(r.read())
start = time.monotonic()
first, longest, held, doc = {}, 0.0, [], None
while time.monotonic() - start < secs:
    try:
        doc = status()
    except Exception:
        time.sleep(1)
        continue
    if cpu_start is None:
        cpu_start, wall_start = cpu_ns(), time.monotonic()
    g = doc["gpus"][0]
    up = doc["daemon"]["uptime_seconds"]
    planned = [(s["mode"], s["direction"], s["size"]) for s in (g["schedule"] or {}).get("series", [])]
    ages = {(s["mode"], s["direction"], s["size"]): s["age_seconds"] for s in g["series"]}
    for k in planned:
        if ages.get(k) is not None and k not in first:
            first[k] = up - ages[k]
    waits = [ages[k] if ages.get(k) is not None else up for k in planned]
    longest = max([longest] + waits)
    if g["schedule"]:
        held.append(g["schedule"]["held_back"])
    time.sleep(5)
cpu_end, wall_end = cpu_ns(), time.monotonic()
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
open(f"{out}/metrics_final.prom", "w").write(metrics)
def gauge(name):
    return {l.split("{", 1)[1].split("}")[0]: float(l.rsplit(" ", 1)[1])
            for l in metrics.splitlines() if l.startswith(name + "{")}
span = (wall_end - wall_start) if wall_start else 0
device = sum(float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
             if l.startswith("xferd_probe_device_seconds_total{"))
up = doc["daemon"]["uptime_seconds"] if doc else 0
g = doc["gpus"][0] if doc else {}
planned = [(s["mode"], s["direction"], s["size"]) for s in (g.get("schedule") or {}).get("series", [])]
result = {
    "uptime_s": up, "planned": len(planned), "measured": len(first),
    "first_measured_s": {" ".join(k): round(v, 1) for k, v in sorted(first.items(), key=lambda x: x[1])},
    "never_measured": [" ".join(k) for k in planned if k not in first],
    "longest_wait_s": round(longest, 1), "duty_cycle": device / up if up else None,
    "held_back_per_cycle": held[-20:], "verdict": doc["verdict"] if doc else None,
    "summary": doc["summary"] if doc else None,
    "daemon_core_pct": 100 * (cpu_end[0] - cpu_start[0]) / 1e9 / span if span else None,
    "link_watch_core_pct": 100 * (cpu_end[1] - cpu_start[1]) / 1e9 / span if span else None,
    "link_transitions": gauge("xferd_pcie_link_transitions_total"),
    "link_reduced_seconds": gauge("xferd_pcie_link_reduced_seconds_total"),
    "link_flapping": gauge("xferd_diagnosis").get('cause="link_flapping",gpu="0"'),
    "link_watch": (g.get("link") or {}).get("watch"),
}
json.dump(result, open(f"{out}/coverage.json", "w"), indent=2)
json.dump(doc, open(f"{out}/status_final.json", "w"), indent=2)
lines = [f"{result['measured']} of {result['planned']} series measured in {up:.0f} s",
         f"all measured by {max(first.values()):.0f} s" if first and not result["never_measured"]
         else f"never measured: {', '.join(result['never_measured'])}",
         f"longest wait for a reading: {longest:.0f} s",
         f"duty cycle over the run: {result['duty_cycle']:.5f}" if result["duty_cycle"] else "",
         f"verdict: {result['verdict']}; {result['summary']}",
         f"daemon CPU {result['daemon_core_pct']:.4f} % of a core, link watch thread "
         f"{result['link_watch_core_pct']:.5f} % over {span:.0f} s" if span else "",
         f"link transitions {result['link_transitions']}, seconds below capability "
         f"{result['link_reduced_seconds']}, link_flapping {result['link_flapping']}"]
open(f"{out}/summary.txt", "w").write("\n".join(l for l in lines if l) + "\n")
print("\n".join(l for l in lines if l))
PY
kill -TERM "$pid"; wait "$pid"; echo "daemon exit $?"; pid=""
grep -E "cycle [0-9]+:" "$out/daemon.log" | tail -3 | cut -c1-300
echo "== $(date -u +%T) done"
