#!/usr/bin/env python3
"""Scrape latency while one address holds many idle connections to xferd, over HTTP and HTTPS.

    bench/http_idle_sockets.py [--xferd build/xferd] [--sockets 1000] [--scrapes 100]
                               [--source 127.0.0.2] [--interval 0.05] [--apart] [--nagle]

Starts xferd on the simulated device (loopback, a free port; HTTPS with the test certificate
of tests/data/tls), then for each of HTTP and HTTPS: holds --sockets connections from
--source that send nothing (HTTPS: a ClientHello, then nothing: half-finished handshakes),
reopening each as the server closes it, and meanwhile scrapes /metrics --scrapes times from
127.0.0.1 on a new connection each (HTTPS: a full handshake). Prints p50/p99/max of the
scrape latency and how many idle connections the server closed, and exits 1 if any scrape
failed or took longer than 1 s (the bound docs/http.md promises). --source 127.0.0.1 holds
them from the scraper's own address. The scraper sets TCP_NODELAY, as Prometheus and curl do;
--nagle leaves it off, as Python's default: then every TLS 1.3 scrape waits ~40 ms for the
server's delayed ACK (docs/http.md).

--apart runs the holder on the last CPU and xferd and the scraper on the others, as when the
abuser is another host: on a 2-core machine the holder's own loop (reopening the sockets the
server refuses, as fast as Python can) otherwise takes the CPU the server and the scraper
need, and the figures say more about the holder than about xferd.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from abuse_support import IdleSockets, percentile, timed_scrape  # noqa: E402
from bench_support import SMALL_PLAN, sim_config  # noqa: E402

def start_xferd(binary, workdir, tls, cpus=None):
    config = workdir / "xferd.toml"
    config.write_text(sim_config("1s", plan=SMALL_PLAN))
    args = [binary, "run", "--config", str(config), "--web.listen-address", "127.0.0.1:0",
            "--state-dir", str(workdir / "state")]
    if tls:
        web = workdir / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {ROOT}/tests/data/tls/server.crt\n"
                       f"  key_file: {ROOT}/tests/data/tls/server.key\n")
        args += ["--web.config.file", str(web)]
    log = open(workdir / ("xferd-https.log" if tls else "xferd-http.log"), "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = Path(log.name).read_text(errors="replace")
        for line in text.splitlines():
            if "serving http" in line:
                return proc, int(line.rsplit(":", 1)[1].split("/")[0])
        if proc.poll() is not None:
            sys.exit(f"xferd exited {proc.returncode}:\n{text}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("xferd did not start serving within 30 s")


def run(binary, tls, args, workdir):
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, holder_cpus = (set(cpus[:-1]), {cpus[-1]}) if args.apart else (None, None)
    proc, port = start_xferd(binary, workdir, tls, server_cpus)
    ca = str(ROOT / "tests/data/tls/server.crt") if tls else None
    try:
        nodelay = not args.nagle
        base = [timed_scrape(port, tls_ca=ca, nodelay=nodelay)[1] for _ in range(10)]
        holder = IdleSockets(port, count=args.sockets, source=args.source, tls=tls,
                             cpus=holder_cpus).start()
        held = holder.wait_held()
        time.sleep(1)
        results = []
        for _ in range(args.scrapes):
            results.append(timed_scrape(port, tls_ca=ca, nodelay=nodelay))
            time.sleep(args.interval)
        holder.stop()
        alive = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    times = [t for _, t in results]
    failed = sum(1 for status, _ in results if status != 200)
    return {
        "scheme": "https" if tls else "http",
        "held": held, "opened": holder.opened, "closed": holder.closed_by_server,
        "idle_p50": percentile(base, 0.5),
        "p50": percentile(times, 0.5), "p99": percentile(times, 0.99), "max": max(times),
        "failed": failed, "alive": alive,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--xferd", default=os.environ.get("XFERD_BINARY", "build/xferd"))
    p.add_argument("--sockets", type=int, default=1000)
    p.add_argument("--scrapes", type=int, default=100)
    p.add_argument("--source", default="127.0.0.2")
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--nagle", action="store_true",
                   help="scrape without TCP_NODELAY (Python's default)")
    p.add_argument("--apart", action="store_true",
                   help="holder on the last CPU, xferd and the scraper on the others")
    args = p.parse_args()
    if args.apart:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("--apart needs 2 CPUs or more")
        os.sched_setaffinity(0, set(cpus[:-1]))  # the scraper
    if not shutil.which(args.xferd) and not Path(args.xferd).is_file():
        sys.exit(f"no xferd binary at {args.xferd} (build it, or pass --xferd)")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.sockets + 256)), hard))

    rows = []
    with tempfile.TemporaryDirectory(prefix="xferd-idle-") as tmp:
        for tls in (False, True):
            workdir = Path(tmp) / ("https" if tls else "http")
            workdir.mkdir()
            rows.append(run(args.xferd, tls, args, workdir))
    print(f"{args.sockets} idle connections from {args.source}, {args.scrapes} scrapes from "
          f"127.0.0.1 every {args.interval * 1000:.0f} ms, each on a new connection"
          + (" (holder on a CPU of its own)" if args.apart else ""))
    print(f"{'':6} {'no abuse p50':>13} {'p50':>8} {'p99':>8} {'max':>8} {'failed':>7} "
          f"{'idle opened':>12} {'closed by xferd':>16}")
    ok = True
    for r in rows:
        print(f"{r['scheme']:6} {r['idle_p50'] * 1000:10.1f} ms {r['p50'] * 1000:5.1f} ms "
              f"{r['p99'] * 1000:5.1f} ms {r['max'] * 1000:5.1f} ms {r['failed']:7d} "
              f"{r['opened']:12d} {r['closed']:16d}")
        ok = ok and r["failed"] == 0 and r["max"] < 1.0 and r["alive"] and r["held"]
    print("PASS: every scrape within 1 s" if ok else "FAIL: a scrape failed or took 1 s or more")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
