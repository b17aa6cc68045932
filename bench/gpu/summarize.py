#!/usr/bin/env python3
"""Turn one bench/gpu/run.sh run into figures: xferd probe vs the plain loop per mode,
the reference 55.3 GB/s, CV over cycles, default-cycle GPU time and duty cycle, device
memory held. Reads the JSON files run.sh wrote; prints a table and writes summary.json."""
import json
import sys
from pathlib import Path

NVBANDWIDTH_GBPS = 55.3  # nvbandwidth v0.8 CE H2D/D2H on the test H200 (DESIGN.md)


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        print(f"note: {path}: {e}")
        return None


def probe_results(doc):
    """Every object with a mode, a direction and a median, wherever xferd put it."""
    found = []
    if isinstance(doc, dict):
        if "mode" in doc and "direction" in doc and "median_bytes_per_s" in doc:
            found.append(doc)
        for v in doc.values():
            found += probe_results(v)
    elif isinstance(doc, list):
        for v in doc:
            found += probe_results(v)
    return found


def main(out):
    out = Path(out)
    probe, plain, cycles = load(out / "probe.json"), load(out / "plain.json"), load(out / "cycles.json")
    summary = {"modes": {}, "targets": {}}
    lines = []
    probe_by_key = {}
    for r in probe_results(probe) if probe else []:
        probe_by_key[(r["mode"], r["direction"])] = r
    plain_by_key = {}
    for r in (plain or {}).get("results", []):
        # Events time pinned copies; pageable is held against the wall clock, as xferd does.
        if (r["mode"] == "pinned") == (r["clock"] == "events"):
            plain_by_key[(r["mode"], r["direction"])] = r["median_bytes_per_s"]
    cycle_modes = (cycles or {}).get("modes", {})
    lines.append(f"{'mode':<17}{'dir':<6}{'xferd probe GB/s':>17}{'plain GB/s':>12}{'ratio':>8}"
                 f"{'vs 55.3':>9}{'cycles GB/s':>13}")
    keys = sorted(set(probe_by_key) | {tuple(k.split()) for k in cycle_modes})
    for key in keys:
        r = probe_by_key.get(key, {})
        got = r.get("median_bytes_per_s") if r.get("status", "ok") == "ok" else None
        ref = plain_by_key.get(key)
        cyc = cycle_modes.get(" ".join(key), {}).get("median_bytes_per_s")
        entry = {"probe_bytes_per_s": got, "plain_bytes_per_s": ref, "cycles_bytes_per_s": cyc,
                 "status": r.get("status"), "message": r.get("message")}
        if got and ref:
            entry["ratio_to_plain"] = got / ref
        if got and key[0] == "pinned" and key[1] in ("h2d", "d2h"):
            entry["ratio_to_nvbandwidth"] = got / (NVBANDWIDTH_GBPS * 1e9)
        summary["modes"][" ".join(key)] = entry
        fmt = lambda v, scale=1e9, p=2: f"{v / scale:.{p}f}" if v else "-"
        lines.append(f"{key[0]:<17}{key[1]:<6}{fmt(got):>17}{fmt(ref):>12}"
                     f"{fmt(entry.get('ratio_to_plain'), 1, 4):>8}"
                     f"{fmt(entry.get('ratio_to_nvbandwidth'), 1, 4):>9}{fmt(cyc):>13}"
                     + (f"  {r.get('status')}: {r.get('message')}" if r.get("status") not in (None, "ok") else ""))
    if cycles:
        c = cycles.get("pinned_h2d_cycles", {})
        d = cycles.get("default_cycle", {})
        summary["pinned_h2d_cv"] = c.get("cv")
        summary["default_cycle_device_s"] = d.get("device_time_s_median")
        summary["duty_cycle_at_60s"] = d.get("duty_cycle")
        summary["device_memory_held_bytes"] = cycles.get("device_memory_held_bytes")
        summary["overlap_ratio"] = cycles.get("overlap_ratio")
        summary["cycle_errors"] = cycles.get("errors", [])
        lines.append("")
        lines.append(f"pinned h2d over {len(c.get('medians_bytes_per_s', []))} cycles: mean "
                     f"{c.get('mean_bytes_per_s', 0) / 1e9:.2f} GB/s, CV {100 * c.get('cv', 0):.3f} % "
                     f"(target <= 1 %), min {c.get('min_bytes_per_s', 0) / 1e9:.2f}, max "
                     f"{c.get('max_bytes_per_s', 0) / 1e9:.2f}")
        lines.append(f"default cycle GPU time: {1e3 * (d.get('device_time_s_median') or 0):.1f} ms "
                     f"(cycles: {', '.join(f'{1e3 * x:.1f}' for x in d.get('device_time_s', []))} ms); "
                     f"duty cycle at {d.get('interval_s')} s: {100 * (d.get('duty_cycle') or 0):.3f} %")
        lines.append(f"device memory held by the backend: "
                     f"{(cycles.get('device_memory_held_bytes') or 0) / 2**20:.0f} MiB")
        lines.append(f"pinned_async overlap ratios: {cycles.get('overlap_ratio')}")
        for e in cycles.get("errors", []):
            lines.append(f"cycle error: {e}")
    text = "\n".join(lines)
    print(text)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
