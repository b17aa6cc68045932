#!/usr/bin/env python3
"""xferd's resident memory while many clients read the status document of a 64-GPU host,
and the document's size per GPU.

    bench/status_rss.py [--xferd build/xferd] [--devices 64] [--clients 50] [--seconds 15]
                        [--slow N] [--path /api/v1/status] [--full]

Starts xferd on the simulated device with --devices GPUs (every mode and direction, 64 MiB,
as the shipped plan probes), plain HTTP and no login on loopback, waits for the first
cycle (with --full, for 33 cycles half a second apart: every series' ring of recent readings
full, the document at its largest), and prints the status document's size (and per GPU, with gzip beside it). Then
--clients clients read --path (/api/v1/status; / for the status page; /metrics for the
scrape; several, comma-separated, shared out among the clients in turn) from 127.0.0.1 over
and over for --seconds, each on a new connection; --slow of them read each answer a few KiB at a time. It prints the resident
memory (VmRSS) before, the most seen during (sampled every 50 ms), and 3 s after, and exits 1
when RSS went over the daemon's 32 MiB or stayed more than 4 MiB above where it started.
Everything runs on loopback and stops after --seconds.
"""
import argparse
import gzip
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_support import rss_kib, sim_config

BUDGET_MIB = 32


def get(port, path, slow=False):
    s = socket.create_connection(("127.0.0.1", port), 30)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(4096 if slow else 1 << 20)
            if not chunk:
                break
            data += chunk
            if slow:
                time.sleep(0.005)
        return data.partition(b"\r\n\r\n")[2]
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xferd", default="build/xferd")
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--slow", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--path", default="/api/v1/status")
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xferd-status-rss-"))
    try:
        (work / "xferd.toml").write_text(
            sim_config("500ms" if args.full else "5s", args.devices))
        log = open(work / "xferd.log", "wb")
        proc = subprocess.Popen([args.xferd, "run", "--config", str(work / "xferd.toml"),
                                 "--web.listen-address", "127.0.0.1:0",
                                 "--state-dir", str(work / "state")],
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + (240 if args.full else 120)
        port = None
        while time.monotonic() < deadline:
            text = Path(log.name).read_text(errors="replace")
            if "ready: first probe cycle done" in text and (not args.full or
                                                            "cycle 33:" in text):
                port = int(text.split("serving http://127.0.0.1:")[1].split("/")[0])
                break
            if proc.poll() is not None:
                sys.exit(f"xferd exited {proc.returncode}:\n{text}")
            time.sleep(0.1)
        if port is None:
            proc.kill()
            sys.exit("xferd was not ready (or had not run its cycles) in time")
        doc = get(port, "/api/v1/status")
        packed = len(gzip.compress(doc))
        print(f"status document, {args.devices} GPUs: {len(doc):,} B ({len(doc) // args.devices:,} B "
              f"per GPU); gzip {packed:,} B ({packed // args.devices:,} B per GPU)")
        time.sleep(1)
        before = rss_kib(proc.pid)
        stop = threading.Event()
        counts = {"ok": 0, "failed": 0}
        lock = threading.Lock()

        paths = args.path.split(",")

        def client(slow, path):
            while not stop.is_set():
                try:
                    body = get(port, path, slow)
                    ok = len(body) > 1000
                except OSError:
                    ok = False
                with lock:
                    counts["ok" if ok else "failed"] += 1

        threads = [threading.Thread(target=client, args=(i < args.slow, paths[i % len(paths)]))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        peak = before
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            peak = max(peak, rss_kib(proc.pid))
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
        time.sleep(3)
        after = rss_kib(proc.pid)
        proc.terminate()
        proc.wait(10)
        print(f"{args.clients} clients ({args.slow} slow readers), {args.seconds:.0f} s: "
              f"{counts['ok']:,} documents, {counts['failed']} failed; RSS before "
              f"{before / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, 3 s after "
              f"{after / 1024:.1f} MiB")
        bad = peak > BUDGET_MIB * 1024 or after > before + 4 * 1024
        if bad:
            print(f"over the budget: peak must stay within {BUDGET_MIB} MiB and memory go back")
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
