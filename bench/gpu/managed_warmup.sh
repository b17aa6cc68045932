#!/usr/bin/env bash
# Why the managed probes' figure depended on the number of transfers, and whether the
# first-use warm-up (probes/cuda/transfer_probe.h, docs/probe.md "Warm-up") makes it
# stable. One call, about 3 minutes on an H200:
#   1. xferd_managed_ramp: every transfer's duration in order, 40 + 40 in one process, for
#      16 and 64 MiB, each managed path (fault and prefetch, both ways) and a plain fault
#      path without xferd's prefetch home: where the ramp is and whether a second batch
#      repeats it (per-probe) or not (first use).
#   2. xferd probe --json, managed and managed_prefetch at 64 MiB, each a fresh process,
#      at (iterations, warmup) = (5, 2), (20, 2), (40, 0), (5, 8): with the warm-up, the
#      medians agree whatever the count, and the 40 timed transfers show no trend.
#
#   bench/gpu/managed_warmup.sh OUT_DIR
#
# Files in OUT_DIR: ramp.jsonl, probe_<iterations>_<warmup>.json, summary.txt.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: managed_warmup.sh OUT_DIR}
use_bundle "$out"
echo "== $(date -u +%T) ramp"
timeout 150 "$b/bench/gpu/xferd_managed_ramp" --transfers 40 --sizes 16,64 > "$out/ramp.jsonl" \
  2> "$out/ramp.err"
for run in "5 2" "20 2" "40 0" "5 8"; do
  set -- $run
  echo "== $(date -u +%T) xferd probe --iterations $1 --warmup $2"
  timeout 60 "$b/xferd" probe --json --mode managed,managed_prefetch --size 64MiB \
    --iterations "$1" --warmup "$2" > "$out/probe_$1_$2.json" 2> "$out/probe_$1_$2.err"
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
print("1. raw managed paths (GB/s): first 5 / median / last 10 transfers of each batch")
print(f"{'size':>5} {'path':<16} {'A first5':>9} {'A med':>7} {'A last10':>9}   {'B first5':>9} {'B med':>7} {'B last10':>9}")
rows = {}
for line in open(f"{out}/ramp.jsonl"):
    r = json.loads(line)
    rows.setdefault((r["size_mib"], r["path"]), {})[r["batch"]] = r
for (size, path), b in rows.items():
    a, bb = b.get("A"), b.get("B")
    f = lambda r, k: f"{r[k]:.2f}" if r else "-"
    print(f"{size:>5} {path:<16} {f(a,'gbps_first5'):>9} {f(a,'gbps_median'):>7} {f(a,'gbps_last10'):>9}   "
          f"{f(bb,'gbps_first5'):>9} {f(bb,'gbps_median'):>7} {f(bb,'gbps_last10'):>9}")
print("   first use: A ramps (first5 < last10), B does not (B first5 ~ B last10)")
print("   per probe: B ramps as A does; prefetch home: fault_h2d ramps, fault_h2d_plain not")
print()
print("2. xferd probe --json, 64 MiB (GB/s median; trend = last 5 / first 5 durations)")
res = {}
for path in sorted(glob.glob(f"{out}/probe_*.json")):
    it, wu = os.path.basename(path)[6:-5].split("_")
    try:
        doc = json.load(open(path))
    except Exception as e:
        print(f"   {path}: {e}"); continue
    for r in doc["results"]:
        key = f"{r['mode']} {r['direction']}"
        d = r.get("durations_s") or []
        trend = (statistics.median(d[-5:]) / statistics.median(d[:5])) if len(d) >= 10 else float("nan")
        res.setdefault(key, []).append((int(it), int(wu), r["median_bytes_per_s"] / 1e9, trend))
worst = 0.0
for key, runs in res.items():
    runs.sort()
    meds = [m for _, _, m, _ in runs if m > 0]
    spread = (max(meds) / min(meds) - 1) if meds else float("nan")
    worst = max(worst, spread if meds else 0)
    cells = ", ".join(f"{i}/{w}: {m:.2f}" + (f" (trend {t:.3f})" if t == t else "") for i, w, m, t in runs)
    print(f"   {key:<22} {cells}; spread {spread*100:.1f} %")
print()
print(f"CONFIRMED: managed figures within 5 % whatever the count (worst {worst*100:.1f} %)" if worst <= 0.05
      else f"NOT CONFIRMED: managed figures still differ by {worst*100:.1f} % across counts")
PY
