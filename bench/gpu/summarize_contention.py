#!/usr/bin/env python3
"""Figures from one bench/gpu/contention_run.sh run: what xferd cost the co-located
workload, its cadence, DEGRADED verdicts, contended probes, baselines against the
uncontended figures, and the diagnosis causes it gave; per daemon phase (B: default config,
D: busy detection off). Prints a table and writes summary.json in the run's directory.
Metrics that this xferd does not export are reported as "absent".

  summarize_contention.py OUT_DIR          the table; OUT_DIR/summary.json
  summarize_contention.py --workload FILE  one line about one xferd_workload record
  summarize_contention.py --self-test      checks itself on synthetic runs
"""
import json
import re
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

LOSS_TARGET = 0.005        # the workload may lose at most 0.5 % beside the default daemon
# A cycle at least every interval x (1 + jitter) of the default config (60 s, 0.1): one a minute.
CYCLE_GAP_LIMIT_S = 66.0
DIP_BELOW = 0.97           # a fully-on slot under 97 % of the phase's median is a dip
# A baseline this far under the uncontended figure was learned from contended probes. The
# copy-engine and zero-copy modes repeat within a few percent on a healthy GPU; the others
# spread wider (managed_prefetch h2d 62-71 % of the link, pageable +-25 %), while a
# contended probe reads about 0.6 of its figure (pinned bidir 62.7 against 101 GB/s).
LEARNED_LOW = {True: 0.90, False: 0.75}
STEADY_MODES = {"pinned", "pinned_async", "zero_copy"}
ABSENT = "absent"


# ---- inputs ---------------------------------------------------------------------------

def read_lines(path, errors=None):
    """The lines of a text file; None when it is missing."""
    path = Path(path)
    if not path.exists():
        return None
    return path.read_text(errors=errors).splitlines()


def read_workload(path):
    """(slots, summary) of an xferd_workload --out file; (None, None) when missing."""
    lines = read_lines(path)
    if lines is None:
        return None, None
    slots, summary = [], None
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a record cut short
        if "summary" in row:
            summary = row["summary"]
        else:
            slots.append(row)
    return slots, summary


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\d+)?$')


def read_scrapes(path):
    """[(time, [(name, labels, value)])] from the '# scrape_time T' separated file."""
    scrapes = []
    for line in read_lines(path) or []:
        if line.startswith("# scrape_time "):
            scrapes.append((float(line.split()[2]), []))
            continue
        if not line or line.startswith("#") or not scrapes:
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        scrapes[-1][1].append((m.group(1), dict(LABEL.findall(m.group(2) or "")), value))
    return [s for s in scrapes if s[1]]


# spdlog's "%Y-%m-%dT%H:%M:%S.%e%z": 2026-12-01T02:48:56.585+00:00
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+[+-]\d\d:?\d\d) (\w+) (.*)$")
CYCLE = re.compile(r"\bcycle (\d+): ([^;]*);(?:.*?([\d.]+) s wall)?")


def read_log(path):
    """[(time, level, message)] of an xferd log on stderr."""
    lines = []
    for line in read_lines(path, errors="replace") or []:
        m = LOG_TIME.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            lines.append((t, m.group(2), m.group(3)))
    return lines


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


# ---- figures ----------------------------------------------------------------------------

def workload_figures(slots, summary, windows=()):
    """Throughput of one workload record; `windows` are (start, end) times of xferd cycles."""
    if summary is None:
        return None
    full = [s for s in slots if s.get("on_s", 0) >= 0.0999]
    rates = [s["bytes"] / 0.1 for s in full]
    median = statistics.median(rates) if rates else 0
    dips = [r for r in rates if r < DIP_BELOW * median]
    fig = {"mode": summary.get("mode"), "direction": summary.get("direction"),
           "gb_per_s": summary.get("gb_per_s"), "copy_gb_per_s": summary.get("copy_gb_per_s"),
           "active_s": summary.get("active_s"),
           "bytes": summary.get("bytes"), "slot_gb_per_s_median": median / 1e9,
           "full_slots": len(rates), "dip_slots": len(dips),
           # What the dips took, as a share of the phase at its median rate.
           "dip_loss": (sum(median - r for r in dips) / (median * len(rates))) if rates else None}
    if windows:
        inside, outside = [], []
        for s, r in zip(full, rates):
            (inside if any(a < s["t"] + 0.1 and s["t"] < b for a, b in windows) else outside).append(r)
        fig["slots_during_cycles"] = len(inside)
        fig["gb_per_s_during_cycles"] = statistics.mean(inside) / 1e9 if inside else None
        fig["gb_per_s_outside_cycles"] = statistics.mean(outside) / 1e9 if outside else None
    return fig


def cycles_of(log, start, stop):
    cycles = []
    for t, _, msg in log:
        m = CYCLE.search(msg)
        if not m:
            continue
        counts = {}
        for part in m.group(2).split(","):
            p = part.strip().split(" ", 1)
            if len(p) == 2 and p[0].isdigit():
                counts[p[1]] = int(p[0])
        wall = float(m.group(3)) if m.group(3) else 0.0
        ran = sum(counts.get(k, 0) for k in ("ok", "error", "timeout", "contended"))
        cycles.append({"t": t, "number": int(m.group(1)), "counts": counts, "wall_s": wall,
                       "ran": ran})
    out = {"logged": len(cycles),
           "with_probes": sum(1 for c in cycles if c["ran"] > 0),
           "first_after_s": cycles[0]["t"] - start if cycles and start else None,
           "totals": {}}
    for c in cycles:
        for k, v in c["counts"].items():
            out["totals"][k] = out["totals"].get(k, 0) + v
    # Between cycles (the log line comes as each ends), and from the last one to the stop,
    # so a daemon that went quiet shows.
    for key, chosen in (("", cycles), ("_with_probes", [c for c in cycles if c["ran"] > 0])):
        times = [c["t"] for c in chosen]
        out[f"mean_interval{key}_s"] = ((times[-1] - times[0]) / (len(times) - 1)
                                        if len(times) >= 2 else None)
        ends = times + ([stop] if stop and times else [])
        out[f"longest_gap{key}_s"] = max((b - a for a, b in zip(ends, ends[1:])), default=None)
    return out, [(c["t"] - c["wall_s"], c["t"]) for c in cycles if c["ran"] > 0]


def series(scrape, name):
    return [(labels, v) for n, labels, v in scrape[1] if n == name]


def exists(scrapes, name):
    return any(series(s, name) for s in scrapes)


def reference_medians(*docs):
    """(mode, direction) -> mean over the docs of the 64 MiB median, status ok."""
    got = {}
    for doc in docs:
        for r in (doc or {}).get("results", []):
            if r.get("status") == "ok" and r.get("size_bytes") == 64 << 20 and r.get("median_bytes_per_s"):
                got.setdefault((str(r.get("gpu", 0)), r["mode"], r["direction"]), []).append(
                    r["median_bytes_per_s"])
    return {k: statistics.mean(v) for k, v in got.items()}


def reference_traffic(name, doc):
    """What the link counters showed around each reference probe (alone): the raw NVML
    figures against the probe's own bytes, and how each was judged. A probe alone judged
    contended is a false alarm of the judgement; rx/own and tx/own show the counters'
    overhead the judgement allows for (1.10 in the probe's direction, 0.20 the other way)."""
    rows = []
    for r in (doc or {}).get("results", []):
        c = r.get("contention")
        if not isinstance(c, dict):
            continue
        t = c.get("link_traffic") or {}
        own_h2d, own_d2h = c.get("own_h2d_bytes") or 0, c.get("own_d2h_bytes") or 0
        window = t.get("window_s") or 0
        rows.append({"phase": name, "gpu": r.get("gpu"), "mode": r.get("mode"),
                     "direction": r.get("direction"), "state": c.get("state"),
                     "source": t.get("source"), "window_s": window,
                     "own_gb_per_s": (own_h2d + own_d2h) / window / 1e9 if window else None,
                     "rx_over_own_h2d": t.get("rx_bytes", 0) / own_h2d if own_h2d and t else None,
                     "tx_over_own_d2h": t.get("tx_bytes", 0) / own_d2h if own_d2h and t else None,
                     "rx_gb_per_s": t.get("rx_bytes", 0) / window / 1e9 if window else None,
                     "tx_gb_per_s": t.get("tx_bytes", 0) / window / 1e9 if window else None,
                     "after_rx_gb_per_s": (t.get("after_rx_bytes", 0) / t["after_s"] / 1e9
                                           if t.get("after_s") else None),
                     "after_utilization_percent": t.get("after_utilization_percent"),
                     "foreign_gb_per_s": ((c.get("foreign_h2d_bytes_per_s") or 0)
                                          + (c.get("foreign_d2h_bytes_per_s") or 0)) / 1e9})
    return rows


def daemon_figures(out, name, reference):
    meta = read_json(out / f"{name}_daemon.json") or {}
    log = read_log(out / f"{name}_xferd.log")
    scrapes = read_scrapes(out / f"{name}_metrics.prom")
    cycles, windows = cycles_of(log, meta.get("start"), meta.get("stop"))
    fig = {"exit_code": meta.get("exit_code"), "scrapes": len(scrapes), "cycles": cycles}

    fig["degraded_log_lines"] = sum(1 for _, _, m in log if "verdict DEGRADED" in m)
    if exists(scrapes, "xferd_bandwidth_degraded"):
        ever = {tuple(sorted(l.items())) for s in scrapes
                for l, v in series(s, "xferd_bandwidth_degraded") if v > 0}
        fig["degraded_series_ever"] = len(ever)
    else:
        fig["degraded_series_ever"] = ABSENT

    last = scrapes[-1] if scrapes else None
    runs = {}
    for l, v in series(last, "xferd_probe_runs_total") if last else []:
        runs[l.get("result", "?")] = runs.get(l.get("result", "?"), 0) + v
    fig["probe_runs_by_result"] = runs
    if not scrapes:
        fig["contended_probes"] = ABSENT
    elif any(l.get("result") == "contended" for s in scrapes for l, _ in series(s, "xferd_probe_runs_total")):
        fig["contended_probes"] = runs.get("contended", 0)
        by_mode = {}
        for l, v in series(last, "xferd_probe_runs_total"):
            if l.get("result") == "contended" and v > 0:
                key = f'gpu{l.get("gpu")} {l.get("mode")}'
                by_mode[key] = by_mode.get(key, 0) + v
        fig["contended_by_mode"] = by_mode
    else:
        fig["contended_probes"] = ABSENT
    fig["contended_log_lines"] = sum(1 for _, _, m in log if "contended" in m and "cycle " not in m)

    causes = {}
    for s in scrapes:
        for l, v in series(s, "xferd_diagnosis"):
            if v > 0:
                causes.setdefault(l.get("cause", "?"), set()).add(l.get("gpu", "?"))
    for _, _, m in log:
        for c in re.findall(r"likely (\w+) \(", m):
            causes.setdefault(c, set()).add("log")
    fig["diagnosis_causes"] = {c: sorted(g) for c, g in sorted(causes.items())}

    values = [v for s in scrapes for _, v in series(s, "xferd_foreign_traffic_bytes_per_second")]
    fig["foreign_traffic_max_gb_per_s"] = max(values) / 1e9 if values else ABSENT
    # The link read around the probes: the foreign traffic has a series (absent where not).
    fig["traffic_readable_scrapes"] = (
        sum(1 for s in scrapes if series(s, "xferd_foreign_traffic_bytes_per_second")) / len(scrapes)
        if scrapes else ABSENT)

    # The lowest each baseline went, against the uncontended figure of its mode.
    lowest = {}
    for s in scrapes:
        for l, v in series(s, "xferd_bandwidth_baseline_bytes_per_second"):
            k = (l.get("gpu", "0"), l.get("mode"), l.get("direction"), l.get("size", ""))
            lowest[k] = min(v, lowest.get(k, v))
    baselines, learned = [], 0
    for (gpu, mode, direction, size), v in sorted(lowest.items()):
        # The references are 64 MiB probes; other sizes have none.
        ref = reference.get((gpu, mode, direction)) if size in ("", "64MiB") else None
        ratio = v / ref if ref else None
        steady = mode in STEADY_MODES
        low = ratio is not None and ratio < LEARNED_LOW[steady]
        learned += low
        baselines.append({"gpu": gpu, "mode": mode, "direction": direction, "size": size,
                          "lowest_gb_per_s": v / 1e9,
                          "uncontended_gb_per_s": ref / 1e9 if ref else None,
                          "ratio": ratio, "steady_mode": steady, "learned_contended": low})
    fig["baselines"] = baselines
    fig["baselines_learned_contended"] = learned if scrapes else ABSENT
    return fig, windows


def summarize(out):
    out = Path(out)
    r1, r2 = read_json(out / "R1_probe.json"), read_json(out / "R2_probe.json")
    reference = reference_medians(r1, r2)
    doc = {"workload": {}, "daemon": {}, "checks": {}}
    doc["reference_link_traffic"] = reference_traffic("R1", r1) + reference_traffic("R2", r2)
    daemon = {}
    for name in ("B", "D"):
        daemon[name] = daemon_figures(out, name, reference)
        doc["daemon"][name] = daemon[name][0]

    w = doc["workload"]
    for key, file, name in (("A", "A_workload", None), ("C", "C_workload", None),
                            ("B_steady", "B_workload_steady", "B"), ("B_bursts", "B_workload_bursts", "B"),
                            ("D_steady", "D_workload_steady", "D"), ("D_bursts", "D_workload_bursts", "D")):
        slots, summary = read_workload(out / f"{file}.jsonl")
        fig = workload_figures(slots, summary, daemon[name][1] if name else ())
        if fig is None:
            err = out / f"{file}.err"
            w[key] = {"missing": (err.read_text().strip().splitlines() or ["no record"])[-1]
                      if err.exists() else "no record"}
        else:
            w[key] = fig
    # Steady phases are held to the alone phases' GB/s over their seconds on; bursts to
    # their GB/s while copying (gaps and each burst's drain would blur the other).
    alone = [w[k]["gb_per_s"] for k in ("A", "C") if w[k].get("gb_per_s")]
    alone_rate = statistics.mean(alone) if alone else None
    alone_copy = [w[k]["copy_gb_per_s"] for k in ("A", "C") if w[k].get("copy_gb_per_s")]
    alone_copy_rate = statistics.mean(alone_copy) if alone_copy else None
    doc["alone_gb_per_s"] = alone_rate
    doc["alone_copy_gb_per_s"] = alone_copy_rate
    doc["alone_spread"] = (abs(alone[0] - alone[1]) / alone_rate) if len(alone) == 2 else None
    for k in ("B_steady", "B_bursts", "D_steady", "D_bursts"):
        key, ref = (("gb_per_s", alone_rate) if k.endswith("steady")
                    else ("copy_gb_per_s", alone_copy_rate))
        if ref and w[k].get(key):
            w[k]["loss_vs_alone"] = 1 - w[k][key] / ref
            w[k]["loss_measured_on"] = key

    b, d = doc["daemon"]["B"], doc["daemon"]["D"]
    c = doc["checks"]
    loss = w["B_steady"].get("loss_vs_alone")
    c["B_steady_loss_le_0.5pct"] = None if loss is None else loss <= LOSS_TARGET
    gap = b["cycles"]["longest_gap_s"]
    c["B_cycle_every_minute"] = None if gap is None else gap <= CYCLE_GAP_LIMIT_S
    c["B_zero_degraded"] = b["degraded_log_lines"] == 0 and b["degraded_series_ever"] in (0, ABSENT)
    c["B_zero_baselines_from_contended"] = (None if b["baselines_learned_contended"] == ABSENT
                                            else b["baselines_learned_contended"] == 0)
    c["B_contended_probes"] = b["contended_probes"]
    c["D_contended_probes"] = d["contended_probes"]
    c["D_cause_link_shared"] = "link_shared" in d["diagnosis_causes"]
    c["D_degraded_log_lines"] = d["degraded_log_lines"]
    ref = doc["reference_link_traffic"]
    c["R_alone_never_contended"] = (ABSENT if not ref
                                    else all(x["state"] != "contended" for x in ref))
    (out / "summary.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc, render(doc)


# ---- the table ----------------------------------------------------------------------------

def f(v, fmt="{:.3f}"):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return fmt.format(v)


def pct(v):
    return "-" if v is None else f"{100 * v:.2f} %"


def render(doc):
    w, lines = doc["workload"], []
    lines.append("workload (GB/s over its seconds on; median of fully-on 100 ms slots; dips: slots "
                 f"under {DIP_BELOW:.0%} of that median and what they cost)")
    lines.append(f"{'phase':<30}{'GB/s':>9}{'copying':>9}{'slot med':>10}{'loss':>11}{'dips':>6}"
                 f"{'dip cost':>10}{'in cycles':>11}{'outside':>9}")
    names = {"A": "A alone, steady", "C": "C alone, steady", "B_steady": "B beside xferd, steady",
             "B_bursts": "B beside xferd, bursts", "D_steady": "D busy off, steady",
             "D_bursts": "D busy off, bursts"}
    for k, label in names.items():
        x = w.get(k, {})
        if "missing" in x:
            lines.append(f"{label:<30}  not run: {x['missing']}")
            continue
        loss = x.get("loss_vs_alone")
        lines.append(f"{label:<30}{f(x.get('gb_per_s')):>9}{f(x.get('copy_gb_per_s')):>9}"
                     f"{f(x.get('slot_gb_per_s_median')):>10}"
                     f"{('-' if loss is None else f'{100 * loss:+.2f} %'):>11}{x.get('dip_slots', 0):>6}"
                     f"{pct(x.get('dip_loss')):>10}{f(x.get('gb_per_s_during_cycles'), '{:.2f}'):>11}"
                     f"{f(x.get('gb_per_s_outside_cycles'), '{:.2f}'):>9}")
    lines.append(f"alone: {f(doc['alone_gb_per_s'])} GB/s, {f(doc['alone_copy_gb_per_s'])} copying (A and C "
                 f"apart by {pct(doc['alone_spread'])}); loss against them: GB/s for steady phases, "
                 f"copying for bursts; loss target <= {LOSS_TARGET:.1%} with the default config")
    lines.append("")
    b, d = doc["daemon"]["B"], doc["daemon"]["D"]
    lines.append(f"{'xferd':<44}{'B (default)':>22}{'D (busy off)':>22}")

    def row(label, fn):
        lines.append(f"{label:<44}{fn(b):>22}{fn(d):>22}")
    row("exit code after SIGTERM / scrapes", lambda x: f"{x['exit_code']} / {x['scrapes']}")
    row("cycles logged (with probes run)", lambda x: f"{x['cycles']['logged']} ({x['cycles']['with_probes']})")
    row("first cycle logged after start, s", lambda x: f(x["cycles"]["first_after_s"], "{:.1f}"))
    row("mean interval between cycles, s", lambda x: f(x["cycles"]["mean_interval_s"], "{:.1f}"))
    row(f"longest gap between cycles, s (<= {CYCLE_GAP_LIMIT_S:g})",
        lambda x: f(x["cycles"]["longest_gap_s"], "{:.1f}"))
    row("  between cycles that ran probes, s",
        lambda x: f(x["cycles"]["longest_gap_with_probes_s"], "{:.1f}"))
    row("DEGRADED log lines", lambda x: str(x["degraded_log_lines"]))
    row("series ever xferd_bandwidth_degraded=1", lambda x: str(x["degraded_series_ever"]))
    row("contended probes (runs_total{result=contended})", lambda x: f(x["contended_probes"], "{:g}"))
    row("baselines learned from contended probes", lambda x: str(x["baselines_learned_contended"]))
    row("foreign traffic seen, max GB/s", lambda x: f(x["foreign_traffic_max_gb_per_s"], "{:.2f}"))
    row("scrapes with the link readable (foreign traffic series)",
        lambda x: f(x["traffic_readable_scrapes"], "{:.0%}"))
    row("diagnosis causes seen", lambda x: ", ".join(x["diagnosis_causes"]) or "none")
    for name, x in (("B", b), ("D", d)):
        lines.append(f"{name} probe runs by result: " + (", ".join(
            f"{k} {v:g}" for k, v in sorted(x["probe_runs_by_result"].items())) or "none scraped")
            + (f"; contended by mode: {x['contended_by_mode']}" if x.get("contended_by_mode") else "")
            + (f"; cycle log totals: {x['cycles']['totals']}" if x["cycles"]["totals"] else ""))
    for name, x in (("B", b), ("D", d)):
        if not x["baselines"]:
            continue
        lines.append(f"{name} baselines, lowest seen / uncontended `xferd probe` (flagged under "
                     f"{LEARNED_LOW[True]:.2f} for {', '.join(sorted(STEADY_MODES))}, {LEARNED_LOW[False]:.2f} other):")
        for y in x["baselines"]:
            lines.append(f"  gpu{y['gpu']} {y['mode']:<17}{y['direction']:<6}{f(y['lowest_gb_per_s'], '{:.2f}'):>8} / "
                         f"{f(y['uncontended_gb_per_s'], '{:.2f}'):>7} GB/s = {f(y['ratio'], '{:.3f}')}"
                         + ("  LEARNED FROM CONTENDED" if y["learned_contended"] else ""))
    if doc.get("reference_link_traffic"):
        lines.append("")
        lines.append("link counters around each reference probe alone (`xferd probe --json`): "
                     "rx/own h2d and tx/own d2h are the counters' overhead")
        lines.append(f"{'':<4}{'mode':<17}{'dir':<6}{'source':<17}{'own GB/s':>9}{'rx GB/s':>9}"
                     f"{'tx GB/s':>9}{'rx/own':>8}{'tx/own':>8}{'after rx':>9}{'util':>6}"
                     f"{'foreign':>8}  state")
        for x in doc["reference_link_traffic"]:
            lines.append(f"{x['phase']:<4}{x['mode']:<17}{x['direction']:<6}{str(x['source']):<17}"
                         f"{f(x['own_gb_per_s'], '{:.2f}'):>9}{f(x['rx_gb_per_s'], '{:.2f}'):>9}"
                         f"{f(x['tx_gb_per_s'], '{:.2f}'):>9}{f(x['rx_over_own_h2d'], '{:.3f}'):>8}"
                         f"{f(x['tx_over_own_d2h'], '{:.3f}'):>8}{f(x['after_rx_gb_per_s'], '{:.2f}'):>9}"
                         f"{f(x['after_utilization_percent'], '{:.0f}'):>6}"
                         f"{f(x['foreign_gb_per_s'], '{:.2f}'):>8}  {x['state']}")
    lines.append("")
    lines.append("checks: " + ", ".join(f"{k}: {v}" for k, v in doc["checks"].items()))
    return "\n".join(lines)


def workload_line(path):
    slots, summary = read_workload(path)
    if summary is None:
        return f"{path}: no summary"
    fig = workload_figures(slots, summary)
    return (f"{fig['gb_per_s']:.3f} GB/s over {fig['active_s']:.1f} s on ({fig['mode']} "
            f"{fig['direction']}), {fig['copy_gb_per_s'] or 0:.3f} while copying; fully-on slot "
            f"median {fig['slot_gb_per_s_median']:.3f}, {fig['dip_slots']} dips")


# ---- self-test on synthetic runs ----------------------------------------------------------

def _synthetic(out, contended=True, degraded=False, quiet=False):
    t0 = 1_800_000_000.0

    def workload(name, start, seconds, rate, dips=(), mode="steady"):
        rows, total = [], 0
        for k in range(int(seconds * 10)):
            b = rate * 0.1 * (0.5 if k in dips else 1)
            total += b
            rows.append({"t": start + k / 10, "bytes": b, "busy": True, "on_s": 0.1})
        summary = {"mode": mode, "direction": "h2d", "gb_per_s": total / seconds / 1e9,
                   "copy_gb_per_s": rate / 1e9,
                   "active_s": seconds, "bytes": total, "slot_gb_per_s_median": rate / 1e9}
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows)
                                           + json.dumps({"summary": summary}) + "\n")

    def log_time(t):  # as xferd writes it
        return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")

    def daemon(name, start, seconds, cause, contended_count):
        (out / f"{name}_daemon.json").write_text(json.dumps(
            {"start": start, "stop": start + seconds, "exit_code": 0, "port": 1}))
        log = [f"{log_time(start + 0.5)} info xferd listening"]
        for i in range(seconds // 60):
            if quiet and 2 <= i <= 4:
                continue
            t = start + 5 + 60 * i
            log.append(f"{log_time(t)} info cycle {i + 1}: 2 ok, 0 error, 0 timeout, 0 unsupported, "
                       f"{11 if i else 0} skipped busy, 0 over budget, 0 held back (allowance); "
                       f"1.000 s wall, 0.055 s device, duty 0.0009; next in 59.0 s; all ok")
        if degraded:
            log.append(f"{log_time(start + 100)} warn gpu 0 pinned h2d: verdict DEGRADED "
                       f"(64MiB 20.00 GB/s low); likely {cause} (detail): advice")
        (out / f"{name}_xferd.log").write_text("\n".join(log) + "\n")
        scrape = []
        for i, t in enumerate((start + 30, start + seconds)):
            scrape.append(f"# scrape_time {t}")
            scrape.append('# HELP xferd_probe_runs_total runs')
            scrape.append(f'xferd_probe_runs_total{{gpu="0",mode="pinned",result="ok"}} {10 * (i + 1)}')
            if contended:
                scrape.append(f'xferd_probe_runs_total{{gpu="0",mode="pinned",result="contended"}} '
                              f'{contended_count * i}')
            scrape.append('xferd_bandwidth_degraded{gpu="0",mode="pinned",direction="h2d"} 0')
            base = 30e9 if (name == "B" and i == 0) else 55e9  # B: a contended first baseline
            scrape.append(f'xferd_bandwidth_baseline_bytes_per_second{{gpu="0",mode="pinned",'
                          f'direction="h2d",size="64MiB"}} {base}')
            scrape.append(f'xferd_diagnosis{{gpu="0",cause="{cause}"}} {1 if i else 0}')
        (out / f"{name}_metrics.prom").write_text("\n".join(scrape) + "\n")

    workload("A_workload", t0, 60, 55e9)
    daemon("B", t0 + 70, 600, "below_band", 3)
    workload("B_workload_steady", t0 + 71, 299, 55e9, dips=(40, 640, 1240))
    workload("B_workload_bursts", t0 + 370, 300, 54.5e9, mode="bursts")
    workload("C_workload", t0 + 680, 60, 54.9e9)
    daemon("D", t0 + 750, 240, "link_shared", 7)
    workload("D_workload_steady", t0 + 751, 119, 54.0e9)
    (out / "D_workload_bursts.err").write_text("xferd_workload: no NVIDIA driver/GPU (test)\n")
    own = 22 * (64 << 20)
    (out / "R1_probe.json").write_text(json.dumps({"results": [
        {"gpu": 0, "mode": "pinned", "direction": "h2d", "size_bytes": 64 << 20, "status": "ok",
         "median_bytes_per_s": 55e9,
         "contention": {"state": "clear", "contended": False, "foreign_h2d_bytes_per_s": 0,
                        "foreign_d2h_bytes_per_s": 0, "own_h2d_bytes": own, "own_d2h_bytes": 0,
                        "link_traffic": {"source": "nvml counters", "window_s": 0.026,
                                         "rx_bytes": 1.07 * own, "tx_bytes": 0.05 * own,
                                         "samples": 2, "after_s": 0.02, "after_rx_bytes": 0,
                                         "after_tx_bytes": 0, "after_utilization_percent": None}}}]}))


def self_test():
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        _synthetic(out)
        doc, text = summarize(out)
        w, b, dd, c = doc["workload"], doc["daemon"]["B"], doc["daemon"]["D"], doc["checks"]
        expect("alone rate", round(doc["alone_gb_per_s"], 3), 54.95)
        # Three half-rate slots in 2990: 1.5 / 2990 below 55 GB/s, against the 54.95 mean.
        expect("B steady loss", round(w["B_steady"]["loss_vs_alone"], 5),
               round(1 - 55 * (1 - 1.5 / 2990) / 54.95, 5))
        expect("B dips", w["B_steady"]["dip_slots"], 3)
        expect("B dip cost", round(w["B_steady"]["dip_loss"], 6), round(1.5 / 2990, 6))
        expect("B bursts loss on copying", round(w["B_bursts"]["loss_vs_alone"], 5),
               round(1 - 54.5 / 54.95, 5))
        expect("D bursts missing", w["D_bursts"]["missing"], "xferd_workload: no NVIDIA driver/GPU (test)")
        expect("B cycles", b["cycles"]["logged"], 10)
        expect("B mean interval", round(b["cycles"]["mean_interval_s"], 1), 60.0)
        expect("B longest gap", round(b["cycles"]["longest_gap_s"], 1), 60.0)
        expect("B cycle totals", b["cycles"]["totals"].get("skipped busy"), 99)
        expect("B contended", b["contended_probes"], 3)
        expect("D contended", dd["contended_probes"], 7)
        expect("B degraded", (b["degraded_log_lines"], b["degraded_series_ever"]), (0, 0))
        expect("B learned", b["baselines_learned_contended"], 1)
        expect("B baseline ratio", round(b["baselines"][0]["ratio"], 4), round(30 / 55, 4))
        expect("D learned", dd["baselines_learned_contended"], 0)
        expect("D causes", list(dd["diagnosis_causes"]), ["link_shared"])
        expect("checks", (c["B_steady_loss_le_0.5pct"], c["B_cycle_every_minute"],
                          c["B_zero_degraded"], c["B_zero_baselines_from_contended"],
                          c["D_cause_link_shared"]), (True, True, True, False, True))
        expect("slots during cycles", w["B_steady"]["slots_during_cycles"] > 0, True)
        expect("summary.json", json.loads((out / "summary.json").read_text())["checks"]["D_contended_probes"], 7)
        ref = doc["reference_link_traffic"]
        expect("reference rows", len(ref), 1)
        expect("counter overhead", round(ref[0]["rx_over_own_h2d"], 3), 1.07)
        expect("alone never contended", c["R_alone_never_contended"], True)
        for phrase in ("LEARNED FROM CONTENDED", "not run: xferd_workload: no NVIDIA driver/GPU",
                       "link_shared"):
            expect(f"table says {phrase!r}", phrase in text, True)

    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        _synthetic(out, contended=False, degraded=True, quiet=True)
        doc, text = summarize(out)
        expect("absent contended", doc["daemon"]["B"]["contended_probes"], ABSENT)
        expect("absent foreign traffic", doc["daemon"]["D"]["foreign_traffic_max_gb_per_s"], ABSENT)
        expect("degraded line", doc["daemon"]["B"]["degraded_log_lines"], 1)
        expect("zero degraded check", doc["checks"]["B_zero_degraded"], False)
        expect("quiet daemon", (round(doc["daemon"]["B"]["cycles"]["longest_gap_s"]),
                                doc["checks"]["B_cycle_every_minute"]), (240, False))
        expect("cause from the log", "log" in doc["daemon"]["B"]["diagnosis_causes"]["below_band"], True)

    with tempfile.TemporaryDirectory() as d:
        doc, text = summarize(Path(d))  # nothing ran: every figure missing, no exception
        expect("empty run", doc["daemon"]["B"]["contended_probes"], ABSENT)
        expect("no reference traffic", doc["checks"]["R_alone_never_contended"], ABSENT)

    for line in failures:
        print("FAIL", line)
    print(f"summarize_contention self-test: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    if argv[1:2] == ["--workload"] and len(argv) == 3:
        print(workload_line(argv[2]))
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 64
    _, text = summarize(argv[1])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
