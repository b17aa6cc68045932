#!/usr/bin/env python3
"""xferd's resident memory before, during and after floods of TLS connections.

    bench/tls_flood_rss.py [--xferd build/xferd] [--seconds 15]

Starts xferd on the simulated device with TLS (the test certificate of tests/data/tls, on
loopback, a free port) and floods it three ways, one after the other, each for --seconds:

  half-open   1,000 connections from 127.0.0.2 that send a ClientHello and nothing more,
              each reopened as the server closes it (the idle-socket abuse of
              bench/http_idle_sockets.py)
  held        2,000 full handshakes from 16 addresses (127.0.1.1-16), each connection then
              held open and idle
  churn       8 clients from 127.0.0.3, each making a full handshake, sending nothing and
              closing, again and again

For each it prints the resident memory (VmRSS) before, the most seen during (sampled every
50 ms), and 3 s after the flood ended, with the connections the flood got and what the
server refused. Exits 1 when RSS went over the daemon's 32 MiB during a flood, or stayed
more than 4 MiB above where it was before. Everything runs on loopback and stops after
--seconds per flood.
"""
import argparse
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from abuse_support import IdleSockets  # noqa: E402
from bench_support import SMALL_PLAN, rss_kib, sim_config  # noqa: E402

CERT = ROOT / "tests/data/tls/server.crt"
KEY = ROOT / "tests/data/tls/server.key"
BUDGET_MIB = 32


def start_xferd(binary, workdir):
    (workdir / "xferd.toml").write_text(sim_config("1s", plan=SMALL_PLAN))
    (workdir / "web.yml").write_text(f"tls_server_config:\n  cert_file: {CERT}\n"
                                     f"  key_file: {KEY}\n")
    log = open(workdir / "xferd.log", "wb")
    proc = subprocess.Popen([binary, "run", "--config", str(workdir / "xferd.toml"),
                             "--web.listen-address", "127.0.0.1:0",
                             "--state-dir", str(workdir / "state"),
                             "--web.config.file", str(workdir / "web.yml")],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = Path(log.name).read_text(errors="replace")
        if "ready: first probe cycle done" in text:
            port = int(text.split("serving https://127.0.0.1:")[1].split("/")[0])
            return proc, port
        if proc.poll() is not None:
            sys.exit(f"xferd exited {proc.returncode}:\n{text}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("xferd was not ready within 30 s")


class Handshakes:
    """`threads` clients making full handshakes from `sources` (round robin): held open
    (`hold`) up to `count` in all, or closed at once and made again until stopped."""

    def __init__(self, port, sources, threads, count=None, hold=False):
        self.port, self.sources, self.count, self.hold = port, sources, count, hold
        self.ctx = ssl.create_default_context(cafile=str(CERT))
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.made = self.refused = 0
        self.held = []
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self, i):
        n = i
        while not self.stop.is_set():
            with self.lock:
                if self.count is not None and self.made + self.refused >= self.count:
                    break
            source = self.sources[n % len(self.sources)]
            n += len(self.threads)
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10,
                                             source_address=(source, 0))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t = self.ctx.wrap_socket(s, server_hostname="localhost")
            except (OSError, ssl.SSLError):
                with self.lock:
                    self.refused += 1
                continue
            with self.lock:
                self.made += 1
                if self.hold:
                    self.held.append(t)
                    continue
            t.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in self.held:
            s.close()


def flood(pid, port, kind, seconds):
    before = rss_kib(pid)
    if kind == "half-open":
        f = IdleSockets(port, count=1000, source="127.0.0.2", tls=True).start()
    elif kind == "held":
        f = Handshakes(port, [f"127.0.1.{i}" for i in range(1, 17)], 16, count=2000,
                       hold=True).start()
    else:
        f = Handshakes(port, ["127.0.0.3"], 8).start()
    peak = before
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss_kib(pid))
        time.sleep(0.05)
    if kind == "half-open":
        got = f"{f.opened} opened, {f.closed_by_server} closed by xferd"
        f.stop()
    else:
        got = f"{f.made} handshakes, {f.refused} refused"
        f.finish()
    time.sleep(3)
    return before, peak, rss_kib(pid), got


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--xferd", default=os.environ.get("XFERD_BINARY", "build/xferd"))
    p.add_argument("--seconds", type=float, default=15)
    args = p.parse_args()
    if not shutil.which(args.xferd) and not Path(args.xferd).is_file():
        sys.exit(f"no xferd binary at {args.xferd} (build it, or pass --xferd)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))

    ok = True
    with tempfile.TemporaryDirectory(prefix="xferd-tls-rss-") as tmp:
        proc, port = start_xferd(args.xferd, Path(tmp))
        try:
            print(f"xferd over TLS on 127.0.0.1:{port}; each flood {args.seconds:.0f} s; RSS "
                  f"before / most during / 3 s after (MiB)")
            for kind in ("half-open", "held", "churn"):
                before, peak, after, got = flood(proc.pid, port, kind, args.seconds)
                print(f"{kind:9} {before / 1024:6.1f} {peak / 1024:6.1f} {after / 1024:6.1f}   {got}")
                ok = ok and peak <= BUDGET_MIB * 1024 and after <= before + 4 * 1024
            alive = proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    ok = ok and alive
    print(f"PASS: within {BUDGET_MIB} MiB during every flood, back within 4 MiB after" if ok else
          f"FAIL: over {BUDGET_MIB} MiB during a flood, or not back after (or xferd died)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
