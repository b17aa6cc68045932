#!/usr/bin/env python3
"""Each link-bound mode's hold on its GPU's band on every host link type, as the code
decides it (core::HoldOf, core::ModeBand, core::ExpectedLinkShare).

    bench/band_holds.py [--xferd build/xferd] [--chunk 1MiB]

For PCIe Gen3, Gen4 and Gen5 x16 and NVLink-C2C, runs `xferd probe --simulate --json` (64 MiB,
pinned_async in --chunk chunks, time_scale 0) and prints one markdown row per link-bound
(mode, direction): whether the band holds it or why not, the band it is held to (GB/s and
as shares of the link), pinned_async's modelled share of the link, and what the simulated
device read. The held / band / share columns come from the daemon's rules; the last one from
the simulator's model, a check that the simulator agrees with them, not a hardware figure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

LINKS = [("PCIe Gen3 x16", 'link = "gen3x16"'), ("PCIe Gen4 x16", 'link = "gen4x16"'),
         ("PCIe Gen5 x16", 'link = "gen5x16"'), ("NVLink-C2C", "c2c = true")]
LINK_BOUND = [("pinned", "h2d"), ("pinned", "d2h"), ("pinned", "bidir"), ("pinned_async", "h2d"),
              ("pinned_async", "d2h"), ("zero_copy", "h2d"), ("zero_copy", "d2h"),
              ("managed_prefetch", "h2d")]


def probe(xferd, link_line, chunk):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "xferd.toml")
        with open(cfg, "w") as f:
            f.write(f'[probe]\nchunk = "{chunk}"\n\n'
                    f"[simulate]\nenabled = true\ntime_scale = 0\n{link_line}\n")
        out = subprocess.run([xferd, "probe", "--simulate", "-c", cfg, "--json", "--size",
                              "64MiB", "--iterations", "10"],
                             capture_output=True, text=True, timeout=300)
        if out.returncode not in (0, 1):
            sys.exit(f"xferd probe failed: {out.stderr}")
        return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xferd", default="build/xferd")
    ap.add_argument("--chunk", default="1MiB")
    args = ap.parse_args()
    print("| link | mode, direction | held | band, GB/s (share of the link) "
          "| modelled share | simulated, GB/s per direction |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, line in LINKS:
        doc = probe(args.xferd, line, args.chunk)
        rows = {(r["mode"], r["direction"]): r for r in doc["results"] if r["gpu"] == 0}
        # Any row's reading over its "% link" gives the rate the band is a share of.
        first = next(r for r in doc["results"] if r["percent_of_link"])
        per_direction = first["median_bytes_per_s"] / (2 if first["direction"] == "bidir" else 1)
        link_rate = per_direction * 100 / first["percent_of_link"]
        for pair in LINK_BOUND:
            r = rows.get(pair)
            if r is None:
                continue
            band = r["band"]
            if band["lower_bytes_per_s"] is not None:
                lo, hi = band["lower_bytes_per_s"], band["upper_bytes_per_s"]
                held = f"{lo / 1e9:.1f}-{hi / 1e9:.1f} ({lo / link_rate:.2f}-{hi / link_rate:.2f})"
            else:
                held = "baseline only"
            share = band["expected_link_share"]
            reading = r["median_bytes_per_s"] / (2 if pair[1] == "bidir" else 1)
            print(f"| {name} | `{pair[0]}` {pair[1]} | {band['hold']} | {held} | "
                  f"{'' if share is None else f'{share:.2f}'} | {reading / 1e9:.1f} |")


if __name__ == "__main__":
    main()
