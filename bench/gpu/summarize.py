#!/usr/bin/env python3
"""Turn one bench/gpu/run.sh run into figures: every mode from `xferd probe`, pinned and
pageable against the plain loop (alternating pairs), the reference 55.3 GB/s, CV over
cycles, default-cycle GPU time and duty cycle, device memory held. Reads the JSON files
run.sh wrote; prints a table and writes summary.json."""
import json
import statistics
import sys
from pathlib import Path

NVBANDWIDTH = 55.3e9  # nvbandwidth v0.8 CE H2D/D2H on the test H200 (docs/gpu-results.md)


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        print(f"note: {path}: {e}")
        return None


def probe_rows(doc):
    rows = {}
    for r in (doc or {}).get("results", []):
        rows[(r["mode"], r["direction"])] = r
    return rows


def plain_rows(doc):
    # Events time pinned copies; pageable is held against the wall clock, as xferd times it.
    return {(r["mode"], r["direction"]): r["median_bytes_per_s"]
            for r in (doc or {}).get("results", [])
            if (r["mode"] == "pinned") == (r["clock"] == "events")}


def gb(v, digits=2):
    return f"{v / 1e9:.{digits}f}" if v else "-"


def main(out):
    out = Path(out)
    probe, pairs, cycles = load(out / "probe.json"), load(out / "pairs.json"), load(out / "cycles.json")
    summary = {"modes": {}, "pairs": {}}
    lines = ["every mode, `xferd probe --json --size 64MiB --iterations 20`:",
             f"{'mode':<17}{'dir':<6}{'GB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'GPU ms':>9}  verdict"]
    for (mode, direction), r in probe_rows(probe).items():
        ok = r.get("status") == "ok"
        summary["modes"][f"{mode} {direction}"] = {
            k: r.get(k) for k in ("status", "message", "median_bytes_per_s", "p50_s", "p99_s",
                                   "p999_s", "device_time_s", "overlap_ratio", "verdict")}
        lines.append(f"{mode:<17}{direction:<6}{gb(r.get('median_bytes_per_s')) if ok else '-':>8}"
                     f"{1e3 * (r.get('p50_s') or 0):>9.3f}{1e3 * (r.get('p99_s') or 0):>9.3f}"
                     f"{1e3 * (r.get('device_time_s') or 0):>9.1f}  {r.get('verdict') or r.get('message')}"
                     + (f" overlap {r['overlap_ratio']:.2f}" if r.get("overlap_ratio") is not None else ""))

    polled = (pairs or {}).get("plain_while_link_polled")
    unpolled = (pairs or {}).get("plain_not_polled")
    pairs = (pairs or {}).get("pairs", [])
    ratios, probe_medians, plain_medians = {}, {}, {}
    for pair in pairs:
        p, q = probe_rows(pair.get("probe")), plain_rows(pair.get("plain"))
        for key, ref in q.items():
            got = p.get(key, {}).get("median_bytes_per_s")
            if got and ref and p[key].get("status") == "ok":
                ratios.setdefault(key, []).append(got / ref)
                probe_medians.setdefault(key, []).append(got)
                plain_medians.setdefault(key, []).append(ref)
    lines += ["", f"xferd probe / plain cudaMemcpy loop, {len(pairs)} alternating pairs "
                  "(median of the pair ratios; each pair's ratio):"]
    for key in sorted(ratios):
        entry = {"ratios": ratios[key], "median_ratio": statistics.median(ratios[key]),
                 "probe_median_bytes_per_s": statistics.median(probe_medians[key]),
                 "plain_median_bytes_per_s": statistics.median(plain_medians[key])}
        if key[0] == "pinned":
            entry["probe_vs_nvbandwidth"] = entry["probe_median_bytes_per_s"] / NVBANDWIDTH
        summary["pairs"][" ".join(key)] = entry
        lines.append(f"{key[0]:<9}{key[1]:<5} xferd {gb(entry['probe_median_bytes_per_s'])} GB/s, plain "
                     f"{gb(entry['plain_median_bytes_per_s'])} GB/s, ratio {entry['median_ratio']:.4f} "
                     f"[{', '.join(f'{x:.4f}' for x in ratios[key])}]"
                     + (f"; vs nvbandwidth 55.3: {entry['probe_vs_nvbandwidth']:.4f}"
                        if "probe_vs_nvbandwidth" in entry else ""))

    if polled and unpolled:
        a, b = plain_rows(polled), plain_rows(unpolled)
        summary["plain_link_polled_vs_not"] = {" ".join(k): a[k] / b[k] for k in a if b.get(k)}
        lines.append("plain loop with the link's sysfs attributes read every 5 ms / without: " +
                     ", ".join(f"{k} {v:.4f}" for k, v in summary["plain_link_polled_vs_not"].items()))

    if cycles:
        sets = cycles.get("pinned_h2d_cycles", [])
        d = cycles.get("default_cycle", {})
        summary["pinned_h2d_cv_per_set"] = [s.get("cv") for s in sets]
        summary["default_cycle_device_s"] = d.get("device_time_s_median")
        summary["duty_cycle_at_60s"] = d.get("duty_cycle")
        summary["device_memory_held_bytes"] = cycles.get("device_memory_held_bytes")
        summary["overlap_ratio"] = cycles.get("overlap_ratio")
        summary["cycle_errors"] = cycles.get("errors", [])
        lines.append("")
        for i, s in enumerate(sets):
            lines.append(f"pinned h2d, set {i + 1}: {len(s.get('medians_bytes_per_s', []))} cycles, mean "
                         f"{gb(s.get('mean_bytes_per_s'))} GB/s, CV {100 * s.get('cv', 0):.3f} % "
                         f"(target <= 1 %), min {gb(s.get('min_bytes_per_s'))}, max "
                         f"{gb(s.get('max_bytes_per_s'))}")
        lines.append(f"default cycle GPU time: {1e3 * (d.get('device_time_s_median') or 0):.1f} ms "
                     f"(cycles: {', '.join(f'{1e3 * x:.1f}' for x in d.get('device_time_s', []))} ms); "
                     f"duty cycle at {d.get('interval_s')} s: {100 * (d.get('duty_cycle') or 0):.3f} %")
        sched = cycles.get("scheduled") or {}
        if sched:
            summary["scheduled"] = sched
            rotation = (f"a full rotation every {sched['full_rotation_minutes']:.1f} min"
                        if "full_rotation_minutes" in sched
                        else f"headline overdraws: cycles {sched.get('cycles_spaced_s', 0):.0f} s apart")
            lines.append(f"default cycle GPU time per minute: {1e3 * sched['device_time_per_minute_s']:.1f} ms "
                         f"(max_duty_cycle {sched['max_duty_cycle']}, interval {sched['interval_s']} s; "
                         f"headline {1e3 * sched['headline_device_time_s']:.1f} ms every cycle, {rotation})")
        per_mode = {k: v.get("device_time_s_median") for k, v in cycles.get("modes", {}).items()}
        lines.append("  GPU ms per probe: " + ", ".join(
            f"{k} {1e3 * v:.1f}" for k, v in sorted(per_mode.items(), key=lambda kv: -kv[1])))
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
