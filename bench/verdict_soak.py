#!/usr/bin/env python3
"""The verdict over time: one daemon with the shipped defaults on a simulated link for
MINUTES, a fault put on by SIGHUP at --fault-at and taken off at --clear-at, the status
document read every --every seconds of the daemon's time. Prints a timeline (what was
measured: series with a reading, the oldest reading, probe runs by result; what was judged:
the verdict, degraded series, the leading cause) and a summary: every series measured?, the
oldest any reading got, when the verdict flipped each way, whether it ever rested on a stale
reading. Reuses bench/verdict_timing.py's daemon handling.

    bench/verdict_soak.py --xferd build/xferd --link gen4x16 --minutes 22 --speedup 1
    bench/verdict_soak.py --xferd build/xferd --link gen5x16 --minutes 22 --speedup 1

--speedup 1 runs in real time (22 minutes); [simulate] speedup above 1 runs the same plan on
simulated time, faster."""
import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdict_timing import LINK_NAMES, LINKS, Daemon, fault_on, reloaded, uptime  # noqa: E402


def runs_by_result(metrics):
    out = {}
    for m in re.finditer(r'^xferd_probe_runs_total\{[^}]*result="(\w+)"[^}]*\} (\S+)', metrics,
                         re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def sample(d):
    doc = d.status()
    g = doc["gpus"][0]
    planned = [(s["mode"], s["direction"], s["size"]) for s in (g.get("schedule") or {}).get(
        "series", []) if s["class"] != "unsupported"]
    ages = {(s["mode"], s["direction"], s["size"]): s["age_seconds"] for s in g["series"]}
    measured = [k for k in planned if ages.get(k) is not None]
    degraded = [f"{s['mode']} {s['direction']}" for s in g["series"] if s.get("degraded")]
    headline = g.get("headline") or {}
    return {"t": uptime(doc), "verdict": doc["verdict"], "planned": len(planned),
            "measured": len(measured),
            "oldest_s": max((ages[k] for k in measured), default=None),
            "degraded": degraded, "cause": headline.get("cause"),
            "runs": runs_by_result(d.get("/metrics"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xferd", required=True)
    ap.add_argument("--link", default="gen4x16", choices=sorted(LINKS))
    ap.add_argument("--fault", default="degrade", choices=("degrade", "downtrain"))
    ap.add_argument("--minutes", type=float, default=22)
    ap.add_argument("--fault-at", type=float, default=8, help="minute the fault starts")
    ap.add_argument("--clear-at", type=float, default=14, help="minute the fault ends")
    ap.add_argument("--every", type=float, default=30, help="seconds between readings")
    ap.add_argument("--speedup", type=float, default=1)
    a = ap.parse_args()
    rows, t_on, t_off = [], None, None
    with tempfile.TemporaryDirectory(prefix="xferd-soak-") as tmp:
        d = Daemon(a.xferd, Path(tmp), a.link, a.speedup)
        try:
            next_at = 0.0
            while True:
                now = uptime(d.status())
                if t_on is None and now >= a.fault_at * 60:
                    t_on = reloaded(d, [fault_on(a.fault, a.link)])
                if t_on is not None and t_off is None and now >= a.clear_at * 60:
                    t_off = reloaded(d, [])
                if now >= next_at:
                    rows.append(sample(d))
                    next_at += a.every
                if now >= a.minutes * 60:
                    break
                time.sleep(min(0.5, a.every / a.speedup / 4))
        finally:
            d.stop()

    print(f"{LINK_NAMES[a.link]}, shipped defaults, {a.minutes:g} min; {a.fault} from "
          f"{t_on:.0f} s to {t_off:.0f} s (daemon time)\n")
    print("| t | verdict | series measured | oldest reading | degraded | cause | runs ok / contended / other |")
    print("| ---: | --- | ---: | ---: | --- | --- | --- |")
    for r in rows:
        runs = r["runs"]
        other = sum(v for k, v in runs.items() if k not in ("ok", "contended"))
        oldest = "-" if r["oldest_s"] is None else f"{r['oldest_s']:.0f} s"
        print(f"| {r['t']:.0f} s | {r['verdict']} | {r['measured']}/{r['planned']} | {oldest} | "
              f"{', '.join(r['degraded']) or '-'} | {r['cause'] or '-'} | "
              f"{runs.get('ok', 0):.0f} / {runs.get('contended', 0):.0f} / {other:.0f} |")
    first_all = next((r["t"] for r in rows if r["planned"] and r["measured"] == r["planned"]),
                     None)
    degraded_at = next((r["t"] for r in rows if t_on <= r["t"] and r["verdict"] == "degraded"),
                       None)
    ok_at = next((r["t"] for r in rows if t_off <= r["t"] and r["verdict"] == "ok"), None)
    healthy = [r for r in rows if r["t"] < t_on or (ok_at is not None and r["t"] >= ok_at)]
    print()
    print(f"every series measured by: {'-' if first_all is None else f'{first_all:.0f} s'}")
    print(f"oldest reading at any sample: {max(r['oldest_s'] or 0 for r in rows):.0f} s")
    print(f"DEGRADED after the fault began: "
          f"{'never' if degraded_at is None else f'{degraded_at - t_on:.0f} s'} (to the sample)")
    print(f"ok after the fault ended: {'never' if ok_at is None else f'{ok_at - t_off:.0f} s'} "
          f"(to the sample)")
    print(f"verdicts outside the fault: {sorted({r['verdict'] for r in healthy})}")
    return 0 if degraded_at is not None and ok_at is not None else 1


if __name__ == "__main__":
    sys.exit(main())
