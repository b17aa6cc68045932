#!/usr/bin/env python3
"""The size curve of each probe mode, and what each probe of the default plan costs: the
figures behind two rules of docs/health.md ("What a probe costs on each link"), on the
simulated device (one run per link) or on this machine's GPUs (--real).

1. Every size measures the plateau: each (mode, direction) at 1 to 64 MiB (`xferd probe
   --size S --iterations 20`), as a share of its 64 MiB figure. The plan scales 64 MiB down
   on links slower than Gen4 x16 (core::PlannedSize: 8 MiB on Gen3 x4); the share at that
   size is what the scaling costs.
2. What each probe of the default plan costs (`xferd probe` as the daemon plans it: the
   size for the link, the 25 ms device-time target, 5 to 20 timed transfers): its size,
   timed transfers and device time, and the sum a full rotation costs.

    bench/size_curves.py --xferd build/xferd                   # the simulator, five links
    bench/size_curves.py --xferd build/xferd --real --gpu 0    # a GPU (bench/gpu/size_curves.sh)
    bench/size_curves.py ... --json OUT.json                   # and everything as JSON
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 1 << 20
SIZES = [1, 2, 4, 8, 16, 32, 64]
LINKS = {
    "gen3x4": "link_gen = 3\nlink_width = 4",
    "gen4x16": "link_gen = 4\nlink_width = 16",
    "gen5x16": "link_gen = 5\nlink_width = 16",
    "c2c": "c2c = true",
    "integrated": "integrated = true",
}


def probe(xferd, base, extra):
    out = subprocess.run([xferd, "probe", "--json", *base, *extra], capture_output=True,
                         text=True, timeout=600)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"xferd probe failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)["results"]


def key(r):
    return f'{r["mode"]} {r["direction"]}'


def measure(xferd, base):
    curve = {}
    for size in SIZES:
        for r in probe(xferd, base, ["--size", f"{size}MiB", "--iterations", "20"]):
            if r["status"] == "ok":
                curve.setdefault(key(r), {})[size] = r["median_bytes_per_s"]
    plan = [{"probe": key(r), "size": r["size_bytes"] // MIB if r["size_bytes"] >= MIB else
             r["size_bytes"] / MIB, "transfers": r.get("samples"),
             "device_s": r["device_time_s"], "status": r["status"]}
            for r in probe(xferd, base, [])]
    return {"curve": curve, "plan": plan}


def print_link(name, m):
    print(f"\n## {name}\n")
    print("Bandwidth at each size as a share of its 64 MiB figure (GB/s at 64 MiB):\n")
    print("| probe | " + " | ".join(f"{s} MiB" for s in SIZES) + " | 64 MiB GB/s |")
    print("| --- |" + " ---: |" * (len(SIZES) + 1))
    for probe_name, by_size in m["curve"].items():
        top = by_size.get(64)
        if not top:
            continue
        cells = [f"{by_size[s] / top:.2f}" if s in by_size else "-" for s in SIZES]
        print(f"| {probe_name} | " + " | ".join(cells) + f" | {top / 1e9:.1f} |")
    print("\nThe default plan, one probe each (what a rotation costs):\n")
    print("| probe | size | timed transfers | device time |")
    print("| --- | ---: | ---: | ---: |")
    total = 0.0
    for p in m["plan"]:
        total += p["device_s"] or 0
        print(f'| {p["probe"]} | {p["size"]} MiB | {p["transfers"] or "-"} | '
              f'{(p["device_s"] or 0) * 1e3:.1f} ms |')
    print(f"| all {len(m['plan'])} | | | {total * 1e3:.0f} ms |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xferd", required=True)
    ap.add_argument("--real", action="store_true", help="this machine's GPUs, not the simulator")
    ap.add_argument("--gpu", default=None, help="with --real: the GPU (index or UUID)")
    ap.add_argument("--links", default=",".join(LINKS), help="simulated links")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args()
    results = {}
    if a.real:
        base = ["--gpu", a.gpu] if a.gpu is not None else []
        results["gpu"] = measure(a.xferd, base)
    else:
        with tempfile.TemporaryDirectory(prefix="xferd-sizes-") as tmp:
            for link in [l for l in a.links.split(",") if l]:
                cfg = Path(tmp) / f"{link}.toml"
                cfg.write_text("[simulate]\nenabled = true\ntime_scale = 0\n" + LINKS[link] + "\n")
                results[link] = measure(a.xferd, ["--simulate", "--config", str(cfg)])
    for name, m in results.items():
        print_link(name, m)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
