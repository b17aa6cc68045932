#!/usr/bin/env python3
"""What the status page (/) costs the daemon: bytes, and CPU per rendering, for 1 and 8 GPUs.

    bench/status_page_cost.py [--xferd build/xferd] [--devices 1,8] [--samples 10]

For each GPU count, starts xferd on the simulated device (the default plan: every mode and
direction, 64 MiB; plain HTTP on loopback), lets 36 cycles run (every 500 ms) so that each
series' ring of recent readings is full, then reloads (SIGHUP) with a one-hour interval so
no probe runs while it measures. Then it prints:

- the bytes of the status document, of the page, and of each in gzip;
- the daemon's CPU per request (the sum of its threads' run time, /proc/PID/task/*/schedstat,
  in ns, read just before and just after each answer): for the document and for the page,
  each asked --samples times 1.1 s apart (the document is rendered again once it is a second
  old, so each of these requests renders: the document for /api/v1/status, the document and
  its page for /); the page's own cost is the difference;
- the same for 20 requests of the page within a second: the page of one rendering is served
  to each by reference, so these cost only the answer.

Everything runs on loopback; the daemons it starts are stopped at the end.
"""
import argparse
import gzip
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_support import sim_config

def cpu_ns(pid):
    """The run time of every thread of `pid`, in ns."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def get(port, path, gzipped=False):
    s = socket.create_connection(("127.0.0.1", port), 30)
    try:
        extra = "Accept-Encoding: gzip\r\n" if gzipped else ""
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 20):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        return body
    finally:
        s.close()


def cycles(port):
    return sum(float(line.split()[-1]) for line in get(port, "/metrics").decode().splitlines()
               if line.startswith("xferd_cycles_total{"))


def timed(pid, port, path, gzipped=False):
    """(CPU ns the daemon spent, bytes) for one request."""
    before = cpu_ns(pid)
    body = get(port, path, gzipped)
    return cpu_ns(pid) - before, len(body)


def measure(xferd, devices, samples):
    work = Path(tempfile.mkdtemp(prefix="xferd-page-cost-"))
    config = work / "xferd.toml"
    config.write_text(sim_config("500ms", devices))
    log = open(work / "xferd.log", "wb")
    proc = subprocess.Popen([xferd, "run", "--config", str(config), "--web.listen-address",
                             "127.0.0.1:0", "--state-dir", str(work / "state")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and port is None:
            text = (work / "xferd.log").read_text(errors="replace")
            if "serving http://127.0.0.1:" in text:
                port = int(text.split("serving http://127.0.0.1:")[1].split("/")[0])
            elif proc.poll() is not None:
                sys.exit(f"xferd exited {proc.returncode}:\n{text}")
            time.sleep(0.1)
        while cycles(port) < 36:
            if time.monotonic() > deadline:
                sys.exit("xferd did not run 36 cycles within 120 s")
            time.sleep(0.2)
        # No more probes while measuring: only the requests cost CPU.
        config.write_text(sim_config("1h", devices))
        proc.send_signal(signal.SIGHUP)
        while "reload: configuration" not in (work / "xferd.log").read_text(errors="replace"):
            time.sleep(0.1)
        time.sleep(1.5)

        doc = get(port, "/api/v1/status")
        page = get(port, "/")
        row = {"devices": devices, "doc": len(doc), "doc_gz": len(gzip.compress(doc)),
               "page": len(page), "page_gz": len(get(port, "/", True))}
        for name, path in (("doc_cpu", "/api/v1/status"), ("page_cpu", "/")):
            spent = []
            for _ in range(samples):
                time.sleep(1.1)  # the document a second old: rendered again
                spent.append(timed(proc.pid, port, path)[0])
            row[name] = statistics.median(spent)
        time.sleep(1.1)
        first = timed(proc.pid, port, "/")[0]
        shared = [timed(proc.pid, port, "/")[0] for _ in range(20)]
        row["first"] = first
        row["shared"] = statistics.median(shared)
        return row
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xferd", default="build/xferd")
    ap.add_argument("--devices", default="1,8")
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    rows = [measure(args.xferd, int(n), args.samples) for n in args.devices.split(",")]
    print("| GPUs | document | gzip | page | gzip | CPU: document rendered | CPU: document and "
          "page rendered | the page's own | page served shared |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['devices']} | {r['doc']:,} B | {r['doc_gz']:,} B | {r['page']:,} B | "
              f"{r['page_gz']:,} B | {r['doc_cpu'] / 1e6:.2f} ms | {r['page_cpu'] / 1e6:.2f} ms | "
              f"{(r['page_cpu'] - r['doc_cpu']) / 1e6:.2f} ms | {r['shared'] / 1e6:.3f} ms |")
    print(f"(CPU: the daemon's threads' run time per request, median of {args.samples}; "
          "shared: median of 20 requests within a second of a rendering)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
