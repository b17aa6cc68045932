#!/usr/bin/env python3
"""The link windows of a daemon log at debug (`xferd run --log.level debug`, or
`LOG_LEVEL=debug bench/gpu/size_curves.sh`): per probe (mode, direction), how many windows
the daemon judged contended, and, for throughput-sampled windows, how many the rule before
2026-12-03 would have (samples counted over the probe's whole device time, pinned_async's
kernels-alone timing included) with the most "foreign" traffic it would have seen.

    python3 bench/gpu/contention_windows.py daemon.log

The daemon's own judgement is read from the log, not recomputed. The earlier rule is
recomputed from the logged figures with core/contention.h's constants as they stand (own
traffic up to 1.10 x its bytes plus 0.20 x the other way's; contended at 2 GB/s of foreign
traffic, the figure on a PCIe x16 link, or 10 % of the probe's own rate where that is more):
a record of what the change removed, not a second judgement."""
import re
import sys
from collections import defaultdict

LINE = re.compile(
    r"gpu (\d+) (\S+) (\S+): link window \((.*?), (\d+) samples\) ([\d.]+) ms: rx ([\d.]+) "
    r"tx ([\d.]+) GB, after [\d.]+ ms rx [\d.]+ tx [\d.]+ GB; own h2d ([\d.]+) d2h ([\d.]+) GB, "
    r"device ([\d.]+) ms \(([\d.]+) computing alone\): (\w+)")
OVERHEAD, REVERSE, LIMIT, NOISE = 1.10, 0.20, 2e9, 0.10


def foreign_before(window_s, rx, tx, own_h2d, own_d2h, device_s, sampled):
    """Foreign bytes/s over the window by the earlier rule (device time incl. compute)."""
    if sampled and 0 < device_s < window_s:
        rx, tx = rx * device_s / window_s, tx * device_s / window_s
    h2d = max(0.0, rx - OVERHEAD * own_h2d - REVERSE * own_d2h)
    d2h = max(0.0, tx - OVERHEAD * own_d2h - REVERSE * own_h2d)
    return (h2d + d2h) / window_s


def main(path):
    stats = defaultdict(lambda: {"n": 0, "now": 0, "before": 0, "worst": 0.0})
    for line in open(path, errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        _, mode, direction, source, _, win, rx, tx, oh, od, dev, _, state = m.groups()
        win, dev = float(win) / 1e3, float(dev) / 1e3
        rx, tx, oh, od = (float(v) * 1e9 for v in (rx, tx, oh, od))
        s = stats[(mode, direction)]
        s["n"] += 1
        s["now"] += state == "contended"
        f = foreign_before(win, rx, tx, oh, od, dev, source == "nvml throughput")
        s["before"] += f >= max(LIMIT, NOISE * (oh + od) / win)
        s["worst"] = max(s["worst"], f)
    if not stats:
        print(f"{path}: no link windows (run the daemon with --log.level debug)")
        return 1
    print("| probe | windows | contended now | contended by the earlier rule | its most foreign |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (mode, direction), s in sorted(stats.items()):
        print(f"| {mode} {direction} | {s['n']} | {s['now']} | {s['before']} | "
              f"{s['worst'] / 1e9:.2f} GB/s |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
