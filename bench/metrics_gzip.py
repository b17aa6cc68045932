#!/usr/bin/env python3
"""Bytes of /metrics in the clear and in gzip, with 1 and with 8 simulated GPUs, and what
gzip saves per GPU.

    bench/metrics_gzip.py [--xferd build/xferd] [--cycles 6]

Runs xferd on the simulated device (the default probe plan: every mode, 64 MiB, pinned both
ways; time_scale 0) until --cycles cycles are done, so every series exists, then scrapes
once plainly and once with Accept-Encoding: gzip (as Prometheus does). Also times 200 of
each on one keep-alive connection: gzip costs a compression of the per-scrape process_*
text only, the registry's text being compressed once per metrics generation.
"""
import argparse
import gzip
import http.client
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(binary, devices, cycles, workdir):
    config = workdir / f"xferd-{devices}.toml"
    config.write_text(f"""[probe]
interval = "200ms"
jitter = 0
iterations = 4
warmup = 0
max_duty_cycle = 1.0

[simulate]
enabled = true
devices = {devices}
time_scale = 0.0
""")
    log = workdir / f"xferd-{devices}.log"
    proc = subprocess.Popen([binary, "run", "--config", str(config), "--web.listen-address",
                             "127.0.0.1:0", "--state-dir", str(workdir / f"state-{devices}")],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            m = re.search(r"serving http://[^:]+:(\d+)", text)
            port = port or (m and int(m.group(1)))
            if len(re.findall(r"\bcycle \d+:", text)) >= cycles:
                break
            if proc.poll() is not None:
                sys.exit(f"xferd exited {proc.returncode}:\n{text}")
            time.sleep(0.2)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def get(headers):
            conn.request("GET", "/metrics", headers=headers)
            r = conn.getresponse()
            return r.getheader("Content-Encoding"), r.read()

        _, plain = get({})
        encoding, packed = get({"Accept-Encoding": "gzip"})
        # The same series (values move between the two scrapes: probes keep running).
        names = lambda text: {line.split(b" ")[0] for line in text.splitlines()  # noqa: E731
                              if line and not line.startswith(b"#")}
        assert encoding == "gzip" and names(gzip.decompress(packed)) == names(plain)
        timings = {}
        for name, headers in (("identity", {}), ("gzip", {"Accept-Encoding": "gzip"})):
            start = time.perf_counter()
            for _ in range(200):
                get(headers)
            timings[name] = (time.perf_counter() - start) / 200
        return len(plain), len(packed), timings
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--xferd", default=os.environ.get("XFERD_BINARY", "build/xferd"))
    p.add_argument("--cycles", type=int, default=6)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="xferd-gzip-") as tmp:
        one = run(args.xferd, 1, args.cycles, Path(tmp))
        eight = run(args.xferd, 8, args.cycles, Path(tmp))
    print(f"{'GPUs':>5} {'identity B':>11} {'gzip B':>8} {'ratio':>6} {'identity ms':>12} {'gzip ms':>8}")
    for n, (plain, packed, t) in ((1, one), (8, eight)):
        print(f"{n:5d} {plain:11d} {packed:8d} {plain / packed:6.1f} "
              f"{t['identity'] * 1000:12.2f} {t['gzip'] * 1000:8.2f}")
    per_plain = (eight[0] - one[0]) / 7
    per_packed = (eight[1] - one[1]) / 7
    print(f"per GPU: {per_plain:.0f} B in the clear, {per_packed:.0f} B in gzip: "
          f"{per_plain - per_packed:.0f} B saved per GPU per scrape "
          f"({100 * (1 - per_packed / per_plain):.0f}%)")


if __name__ == "__main__":
    main()
