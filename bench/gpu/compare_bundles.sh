#!/usr/bin/env bash
# Two builds of xferd on one GPU, alternating, for a change that must not move any figure
# (a refactoring of the probes): `xferd probe --json` (every mode, 64 MiB, 20 transfers)
# from bundle A, then from bundle B, PAIRS (5) times. Per mode and direction: the median
# of the pair ratios B/A and their range; the link-bound results must be within TOLERANCE
# (0.01) of 1. The others (pageable, managed: bounded by the host's staging and page
# faults, which swing by far more than 1 % between runs) are printed, not judged.
#
#   bench/gpu/compare_bundles.sh BUNDLE_A BUNDLE_B [OUT_DIR]   from the repository root
#
# Each bundle is laid out as bench/gpu/README.md says (build/, lib/, env.sh): build A from
# the commit before the change, B from the change. GPU (0) picks the GPU. Writes a_N.json,
# b_N.json, summary.txt and summary.json to OUT_DIR (default $OUT). Exit status: 0 when
# every probe ran in both builds and every link-bound ratio is within the tolerance, 1
# otherwise, 69 when there is no GPU. XFERD_SIMULATE=1 runs both builds on the simulated
# device, to try the script without a GPU.
set -uo pipefail
a=${1:?give bundle A (before) and bundle B (after)}
b=${2:?give bundle A (before) and bundle B (after)}
out=${3:-${OUT:?give an output directory}}
mkdir -p "$out"
pairs=${PAIRS:-5}
gpu=${GPU:-0}
tolerance=${TOLERANCE:-0.01}
sim=()
if [ "${XFERD_SIMULATE:-0}" = 1 ]; then
  sim=(--simulate)
elif ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "compare_bundles: no NVIDIA driver/GPU (nvidia-smi -L fails)" >&2
  exit 69
fi

probe() {  # probe BUNDLE OUT_FILE: each bundle with its own libraries
  (
    # shellcheck disable=SC1091
    [ -f "$1/env.sh" ] && . "$1/env.sh"
    timeout 120 "$1/build/xferd" probe "${sim[@]}" --json --gpu "$gpu" --size 64MiB \
      --iterations 20 > "$2" 2> "$2.log"
  )
}

for rep in $(seq 1 "$pairs"); do
  echo "== $(date -u +%T) pair $rep of $pairs"
  probe "$a" "$out/a_$rep.json"
  probe "$b" "$out/b_$rep.json"
done

python3 - "$out" "$pairs" "$tolerance" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys, pathlib
out, pairs, tolerance = pathlib.Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

def rows(path):
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"note: {path}: {e}")
        return {}
    return {(r["mode"], r["direction"]): r for r in doc.get("results", [])}

ratios, judged, failures, summary = {}, {}, [], {}
for rep in range(1, pairs + 1):
    a, b = rows(out / f"a_{rep}.json"), rows(out / f"b_{rep}.json")
    if not a or not b:
        failures.append(f"pair {rep}: a build printed no results")
    for key in list(a) + [k for k in b if k not in a]:  # in the order the probes ran
        ra, rb = a.get(key, {}), b.get(key, {})
        if ra.get("status") != "ok" or rb.get("status") != "ok":
            failures.append(f"pair {rep} {' '.join(key)}: A {ra.get('status', 'missing')} "
                            f"({ra.get('message')}), B {rb.get('status', 'missing')} ({rb.get('message')})")
            continue
        ratios.setdefault(key, []).append(rb["median_bytes_per_s"] / ra["median_bytes_per_s"])
        judged[key] = rb.get("verdict") != "n/a (not link-bound)"
print(f"B / A, median of {pairs} alternating pairs (64 MiB, 20 transfers); link-bound "
      f"results must be within {100 * tolerance:g} %:")
for key, r in ratios.items():
    median = statistics.median(r)
    ok = abs(median - 1) <= tolerance
    verdict = ("PASS" if ok else "FAIL") if judged[key] else "not judged (not link-bound)"
    if judged[key] and not ok:
        failures.append(f"{' '.join(key)}: ratio {median:.4f}")
    summary[" ".join(key)] = {"ratios": r, "median_ratio": median, "judged": judged[key]}
    print(f"{key[0]:<17}{key[1]:<6}{median:8.4f}  [{min(r):.4f} - {max(r):.4f}]  {verdict}")
for f in failures:
    print(f"FAIL {f}")
print("PASS" if not failures else f"FAIL: {len(failures)} problem(s)")
(out / "summary.json").write_text(json.dumps({"modes": summary, "failures": failures}, indent=2))
sys.exit(1 if failures else 0)
PY
