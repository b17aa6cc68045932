#!/usr/bin/env python3
"""The contention threshold and the expected band on each kind of host link, as xferd
computes them: what docs/health.md's table shows.

    bench/contention_thresholds.py [--xferd build/xferd] [--busy 2GB/s] [--lower 0.63]

For each link (PCIe Gen3 x4 .. Gen5 x16, NVLink-C2C) it runs `xferd probe --json` once on
a simulated GPU with that link (one pinned probe, time_scale 0) and prints the device's
`foreign_traffic_threshold_bytes_per_s` (the foreign traffic at which a probe counts as
contended, besides the counters' noise on the probe's own rate) and `expected_band`, with
the threshold's share of the link and of the room between a healthy pinned reading (0.80
of the link, the low end of where they sit) and the band's lower edge.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

LINKS = [("Gen3 x4", 'link = "gen3x4"'), ("Gen3 x8", 'link = "gen3x8"'),
         ("Gen4 x4", 'link = "gen4x4"'), ("Gen3 x16", 'link = "gen3x16"'),
         ("Gen4 x8", 'link = "gen4x8"'), ("Gen5 x8", 'link = "gen5x8"'),
         ("Gen4 x16", 'link = "gen4x16"'), ("Gen5 x16", 'link = "gen5x16"'),
         ("NVLink-C2C", "c2c = true")]
HEALTHY_SHARE = 0.80


def measure(binary, link_keys, busy, lower, workdir):
    config = workdir / "link.toml"
    config.write_text(f"""[probe]
modes = ["pinned"]
bidirectional = false
sizes = ["4MiB"]
iterations = 2
warmup = 0

[busy]
pcie_bytes_per_second = "{busy}"

[health]
band_lower_fraction = {lower}

[simulate]
enabled = true
time_scale = 0
{link_keys}
""")
    out = subprocess.run([binary, "probe", "--config", str(config), "--json"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode not in (0, 1):
        sys.exit(f"xferd probe failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout)["devices"][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xferd", default="build/xferd")
    parser.add_argument("--busy", default="2GB/s", help="[busy] pcie_bytes_per_second")
    parser.add_argument("--lower", type=float, default=0.63, help="[health] band_lower_fraction")
    args = parser.parse_args()
    print(f"[busy] pcie_bytes_per_second = {args.busy}, band_lower_fraction = {args.lower}")
    print(f"{'link':<11} {'GB/s':>7} {'band GB/s':>13} {'threshold':>10} {'of link':>8} "
          f"{'of room':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, keys in LINKS:
            device = measure(args.xferd, keys, args.busy, args.lower, Path(tmp))
            band = device["expected_band"]
            link = band["lower_bytes_per_s"] / args.lower
            threshold = device["foreign_traffic_threshold_bytes_per_s"]
            room = (HEALTHY_SHARE - args.lower) * link
            print(f"{name:<11} {link / 1e9:>7.2f} "
                  f"{band['lower_bytes_per_s'] / 1e9:>6.2f}-{band['upper_bytes_per_s'] / 1e9:<6.2f} "
                  f"{threshold / 1e9:>10.3f} {threshold / link:>7.1%} {threshold / room:>7.0%}")


if __name__ == "__main__":
    main()
