#!/usr/bin/env python3
"""What a fleet's Prometheus holds of xferd, per metrics profile: measured on the simulated
8-GPU node, then scaled to 10,000 and 100,000 GPUs.

    bench/fleet_sizing.py [--xferd build/xferd] [--prometheus prometheus] [--out DIR]

For each profile ([metrics] profile = "full", the default, and "fleet") it runs `xferd run`
on the simulated HGX node (tests/data/sysfs/hgx-8gpu: 8 GPUs behind 4 switches, so 5
concurrent groups) with the default probe plan (every mode, 64 MiB, pinned both ways: what
deploy/xferd.toml ships), sped up so that every probe and every group has run (interval
1s, max_duty_cycle 1, concurrent_interval 1s, time_scale 0). Once the series count holds
still it scrapes /metrics and counts the series of each GPU, of the host, and the bytes
(plain and gzip'd, level 6). A second run of the fleet profile has every GPU degraded
(a 0.3x fault): its degraded pairs' series come with their verdicts, the profile's worst
case. Then Debian's Prometheus loads the shipped rules (deploy/prometheus/xferd.rules.yml)
and scrapes the daemon for 15 s: the series the rules record, per GPU.

Fleet sizing, for 8-GPU hosts scraped every 30 s (60 s halves the samples):
    active series = hosts x (series per host + 5 per target: up, scrape_*)
                    + GPUs x recorded series per GPU
    memory        = active series x 2.9 KiB (Debian's Prometheus 2.42, measured by
                    tests/integration/test_multigpu.py::test_prometheus_memory_per_series)
    disk          = samples/s x 86,400 x 15 days x 1.5 bytes a sample
Prints the table and writes DIR/fleet_sizing.json when --out is given. Loopback only;
every process it starts is stopped on exit.
"""
import argparse
import gzip
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent
TREE = SOURCE / "tests/data/sysfs/hgx-8gpu"
RULES = SOURCE / "deploy/prometheus/xferd.rules.yml"
GPUS_PER_HOST = 8
TARGET_SERIES = 5  # up, scrape_duration_seconds, scrape_samples_*, scrape_series_added
KIB_PER_HEAD_SERIES = 2.9
BYTES_PER_SAMPLE = 1.5
RETENTION_DAYS = 15
FLEETS = (10_000, 100_000)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(port, state, profile, degraded):
    fault = '[[simulate.fault]]\nkind = "degrade"\nfactor = 0.3\n' if degraded else ""
    return f"""[web]
listen_address = "127.0.0.1:{port}"

[daemon]
state_dir = "{state}"
log_level = "warn"

[probe]
interval = "1s"
jitter = 0
iterations = 4
warmup = 0
max_duty_cycle = 1.0
concurrent_interval = "1s"

[busy]
enabled = false

[health]
consecutive_bad = 1

[metrics]
profile = "{profile}"

[simulate]
enabled = true
time_scale = 0.0
sysfs_root = "{TREE}"
{fault}"""


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read()


def samples(text):
    return [l for l in text.decode().splitlines() if l and not l.startswith("#")]


def measure(binary, work, profile, degraded=False):
    """Runs the daemon until its series hold still; returns (port, process, figures)."""
    port = free_port()
    name = f"{profile}{'-degraded' if degraded else ''}"
    (work / name).mkdir()
    path = work / f"{name}.toml"
    path.write_text(config(port, work / name, profile, degraded))
    proc = subprocess.Popen([binary, "run", "--config", str(path)],
                            stdout=open(work / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
    counts, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"xferd exited {proc.returncode}: {(work / f'{name}.log').read_text()}")
        try:
            counts.append(len(samples(scrape(port))))
        except OSError:
            pass
        if len(counts) >= 8 and len(set(counts[-4:])) == 1:
            break
        time.sleep(1)
    text = scrape(port)
    lines = samples(text)
    per_gpu = [sum(1 for l in lines if f'gpu="{g}"' in l) for g in range(GPUS_PER_HOST)]
    xferd = [l for l in lines if l.startswith("xferd_")]
    return port, proc, {
        "profile": profile, "degraded": degraded,
        "series_per_gpu": per_gpu,
        "series_per_host": len(lines),
        "xferd_series_per_host": len(xferd),
        "bytes": len(text), "gzip_bytes": len(gzip.compress(text, compresslevel=6)),
    }


def recorded_per_gpu(prometheus, work, port, name):
    """Series the shipped rules record for the one scraped host, per GPU."""
    prom_port = free_port()
    cfg = work / f"prometheus-{name}.yml"
    cfg.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "xferd",
                            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}))
    proc = subprocess.Popen([prometheus, f"--config.file={cfg}",
                             f"--web.listen-address=127.0.0.1:{prom_port}",
                             f"--storage.tsdb.path={work / ('tsdb-' + name)}", "--log.level=warn"],
                            stdout=open(work / f"prometheus-{name}.log", "wb"),
                            stderr=subprocess.STDOUT)
    try:
        time.sleep(15)
        q = urllib.parse.urlencode({"query": 'count({__name__=~".+:.+"})'})
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/query?{q}",
                                    timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        return float(result[0]["value"][1]) / GPUS_PER_HOST if result else 0.0
    finally:
        proc.terminate()
        proc.wait(10)


def sizing(host, recorded):
    rows = []
    for gpus in FLEETS:
        hosts = gpus // GPUS_PER_HOST
        active = hosts * (host["series_per_host"] + TARGET_SERIES) + gpus * recorded
        rate = active / 30
        rows.append({"gpus": gpus, "active_series": active, "samples_per_s_at_30s": rate,
                     "memory_gib": active * KIB_PER_HEAD_SERIES / 2**20,
                     "disk_gb_15d": rate * 86_400 * RETENTION_DAYS * BYTES_PER_SAMPLE / 1e9})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xferd", default=str(SOURCE / "build/xferd"))
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    ap.add_argument("--out")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="xferd-sizing-") as tmp:
        work = Path(tmp)
        for profile, degraded in (("full", False), ("fleet", False), ("fleet", True)):
            port, proc, host = measure(args.xferd, work, profile, degraded)
            try:
                if not degraded:
                    host["recorded_per_gpu"] = recorded_per_gpu(args.prometheus, work, port,
                                                                 profile)
                    host["fleets"] = sizing(host, host["recorded_per_gpu"])
            finally:
                proc.terminate()
                proc.wait(10)
            results.append(host)

    print("simulated 8-GPU node (4 switches, 5 concurrent groups), default probe plan:")
    print(f"{'profile':<18}{'series/GPU':>12}{'series/host':>13}{'scrape':>10}{'gzip':>9}"
          f"{'recorded/GPU':>14}")
    for r in results:
        name = r["profile"] + (", all degraded" if r["degraded"] else "")
        per_gpu = f"{min(r['series_per_gpu'])}-{max(r['series_per_gpu'])}"
        rec = f"{r['recorded_per_gpu']:.0f}" if "recorded_per_gpu" in r else "-"
        print(f"{name:<18}{per_gpu:>12}{r['series_per_host']:>13,}{r['bytes'] / 1e3:>9.1f}k"
              f"{r['gzip_bytes'] / 1e3:>8.1f}k{rec:>14}")
    print(f"\nfleets of 8-GPU hosts, 30 s scrape, {KIB_PER_HEAD_SERIES} KiB a head series, "
          f"{RETENTION_DAYS} days at {BYTES_PER_SAMPLE} B a sample:")
    print(f"{'profile':<10}{'GPUs':>9}{'active series':>15}{'samples/s':>11}{'memory':>10}"
          f"{'disk':>9}")
    for r in results:
        for f in r.get("fleets", []):
            print(f"{r['profile']:<10}{f['gpus']:>9,}{f['active_series'] / 1e6:>14.2f}M"
                  f"{f['samples_per_s_at_30s'] / 1e3:>10.0f}k{f['memory_gib']:>7.1f} GiB"
                  f"{f['disk_gb_15d']:>6.0f} GB")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fleet_sizing.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
