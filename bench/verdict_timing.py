#!/usr/bin/env python3
"""How current and how complete xferd's verdict is, measured on the real binary with the
simulated device on simulated time ([simulate] speedup): the shipped defaults (60 s interval,
max_duty_cycle 0.0025, every mode at 64 MiB, consecutive_bad 3) on each link type.

Coverage: from the start, how long until every planned series has a reading, and over the
run the longest any series waited for its next one: the period docs/health.md ("Coverage")
states per link type.

Recovery: a fault applied by SIGHUP after 30 minutes, held 10 minutes, then removed: how
long until each surface says DEGRADED, and how long after the removal each says ok again
(xferd_bandwidth_degraded, /api/v1/status, `xferd health`).

    bench/verdict_timing.py --xferd build/xferd                 # the tables
    bench/verdict_timing.py --xferd build/xferd --json --links gen3x4 --minutes 30

Times are simulated seconds (the daemon's clock, its status document's uptime_seconds); a
60 s cycle takes 60 / speedup seconds of real time. The poll is every 0.1 s of real time,
so a figure is good to about speedup x 0.1 simulated seconds."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

LINKS = {
    "gen3x4": 'link_gen = 3\nlink_width = 4',
    "gen3x16": 'link_gen = 3\nlink_width = 16',
    "gen4x8": 'link_gen = 4\nlink_width = 8',
    "gen4x16": 'link_gen = 4\nlink_width = 16',
    "gen5x16": 'link_gen = 5\nlink_width = 16',
    "c2c": 'c2c = true',
    "integrated": 'integrated = true',
}
LINK_NAMES = {"gen3x4": "PCIe Gen3 x4", "gen3x16": "PCIe Gen3 x16", "gen4x8": "PCIe Gen4 x8",
              "gen4x16": "PCIe Gen4 x16", "gen5x16": "PCIe Gen5 x16", "c2c": "NVLink-C2C",
              "integrated": "integrated"}
LINK_WIDTH = {"gen3x4": 4, "gen3x16": 16, "gen4x8": 8, "gen4x16": 16, "gen5x16": 16}


def fault_on(name, link):
    """The link trained down to half its width (as a reseat gone wrong), or every copy at
    half its bandwidth (a throttled GPU, a host under pressure)."""
    if name == "downtrain":
        return {"kind": "downtrain", "width": LINK_WIDTH[link] // 2}
    return {"kind": "degrade", "factor": 0.5}


FAULTS = ("downtrain", "degrade")


class Daemon:
    def __init__(self, xferd, workdir, link, speedup, extra=""):
        self.xferd, self.dir, self.link, self.speedup, self.extra = xferd, workdir, link, speedup, extra
        self.config = workdir / "xferd.toml"
        self.write([])
        self.log = workdir / "xferd.log"
        self.proc = subprocess.Popen(
            [xferd, "run", "--config", str(self.config), "--web.listen-address", "127.0.0.1:0",
             "--state-dir", str(workdir / "state")],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = re.search(r"serving http://[^:]+:(\d+)", self.log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.05)
        raise RuntimeError("xferd did not start: " + self.log.read_text(errors="replace")[-2000:])

    def write(self, faults):
        text = ("[simulate]\nenabled = true\n" + LINKS[self.link] +
                f"\nspeedup = {self.speedup}\n" + self.extra + "\n")
        for f in faults:
            text += "[[simulate.fault]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in f.items())
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def reload(self, faults):
        self.write(faults)
        self.proc.send_signal(signal.SIGHUP)

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return r.read().decode()

    def status(self):
        return json.loads(self.get("/api/v1/status"))

    def degraded_metric(self):
        """1 if any xferd_bandwidth_degraded is 1, 0 if all are 0, None if there is none."""
        values = [float(line.rsplit(" ", 1)[1]) for line in self.get("/metrics").splitlines()
                  if line.startswith("xferd_bandwidth_degraded{")]
        return None if not values else (1 if max(values) == 1 else 0)

    def health(self):
        r = subprocess.run([self.xferd, "health", "--web.listen-address", f"127.0.0.1:{self.port}"],
                           capture_output=True, text=True, timeout=30)
        return r.returncode, r.stdout.strip()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def uptime(doc):
    return doc["daemon"]["uptime_seconds"]


def wait_uptime(d, seconds, each=None):
    while True:
        doc = d.status()
        if each:
            each(doc)
        if uptime(doc) >= seconds:
            return doc
        time.sleep(0.1)


def reloaded(d, faults):
    """Applies `faults` by SIGHUP; returns the daemon's uptime once it says it applied them
    (a moment later than they took effect on the device: the measure is not flattered)."""
    seen = len(d.log.read_text(errors="replace").splitlines())
    d.reload(faults)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = d.log.read_text(errors="replace").splitlines()[seen:]
        if any("reload: configuration" in l and "applied" in l for l in lines):
            return uptime(d.status())
        time.sleep(0.01)
    raise RuntimeError("the reload was not applied")


def coverage(xferd, link, minutes, speedup, workdir):
    """First time every planned series had a reading, and the longest wait for a reading."""
    d = Daemon(xferd, workdir, link, speedup)
    first_full, longest, planned, held = None, 0.0, 0, 0.0
    try:
        def each(doc):
            nonlocal first_full, longest, planned, held
            g = doc["gpus"][0]
            if not g.get("schedule"):
                return
            want = {(s["mode"], s["direction"], s["size"]) for s in g["schedule"]["series"]
                    if s["class"] != "unsupported"}
            planned = len(want)
            ages = {(s["mode"], s["direction"], s["size"]): s["age_seconds"] for s in g["series"]}
            have = {k for k in want if ages.get(k) is not None}
            if first_full is None and have == want:
                first_full = uptime(doc)
            # A series never measured has waited since the start.
            waits = [ages[k] if ages.get(k) is not None else uptime(doc) for k in want]
            if waits:
                longest = max(longest, max(waits))
            held = max(held, g["schedule"]["held_back"])
        wait_uptime(d, minutes * 60, each)
        duty = None
        m = re.findall(r"^xferd_probe_device_seconds_total\{[^}]*\} (\S+)", d.get("/metrics"), re.M)
        if m:
            duty = float(m[0]) / uptime(d.status())
    finally:
        d.stop()
    return {"link": link, "planned": planned, "all_measured_s": first_full,
            "longest_wait_s": longest, "duty_cycle": duty, "minutes": minutes}


def told(d, since, verdict, limit_s):
    """Simulated seconds after `since` until each surface says `verdict` ("degraded" or
    "ok"): the status document, xferd_bandwidth_degraded (1 or 0) and `xferd health`'s exit
    code (1 or 0), polled every 0.1 s of real time for at most `limit_s`. Returns those
    times by surface (one missing where it never said so) and the last status document."""
    flag = 1 if verdict == "degraded" else 0
    seen = {}
    while uptime(doc := d.status()) - since < limit_s:
        t = uptime(doc) - since
        if "status" not in seen and doc["verdict"] == verdict:
            seen["status"] = t
        if "metrics" not in seen and d.degraded_metric() == flag:
            seen["metrics"] = t
        if "health" not in seen and d.health()[0] == flag:
            seen["health"] = uptime(d.status()) - since  # when it had answered
        if len(seen) == 3:
            break
        time.sleep(0.1)
    return seen, doc


def recovery(xferd, link, fault, speedup, workdir, learn_min=30, hold_min=10, limit_min=20):
    d = Daemon(xferd, workdir, link, speedup)
    out = {"link": link, "fault": fault}
    try:
        wait_uptime(d, learn_min * 60)
        t_on = reloaded(d, [fault_on(fault, link)])
        out["degraded_after_s"], _ = told(d, t_on, "degraded", limit_min * 60)
        out["health_line"] = d.health()[1]
        wait_uptime(d, t_on + hold_min * 60)
        t_off = reloaded(d, [])
        out["ok_after_s"], doc = told(d, t_off, "ok", limit_min * 60)
        out["interval_s"] = doc["daemon"]["interval_seconds"]
        out["bound_s"] = doc["daemon"]["freshness"]["degraded_seconds"]
    finally:
        d.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xferd", required=True)
    ap.add_argument("--links", default=",".join(LINKS))
    ap.add_argument("--minutes", type=float, default=45, help="simulated minutes per coverage run")
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--recovery-links", default="gen3x4,gen4x16,gen5x16")
    ap.add_argument("--speedup", type=float, default=120)
    ap.add_argument("--learn-minutes", type=float, default=30,
                    help="healthy minutes before the fault")
    ap.add_argument("--hold-minutes", type=float, default=10, help="minutes the fault lasts")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    results = {"coverage": [], "recovery": []}
    with tempfile.TemporaryDirectory(prefix="xferd-verdict-") as tmp:
        n = 0
        for link in [l for l in a.links.split(",") if l]:
            n += 1
            w = Path(tmp) / f"c{n}"
            w.mkdir()
            results["coverage"].append(coverage(a.xferd, link, a.minutes, a.speedup, w))
        for link in [l for l in a.recovery_links.split(",") if l]:
            for fault in [f for f in a.faults.split(",") if f]:
                n += 1
                w = Path(tmp) / f"r{n}"
                w.mkdir()
                results["recovery"].append(recovery(a.xferd, link, fault, a.speedup, w,
                                                    a.learn_minutes, a.hold_minutes))
    if a.json:
        print(json.dumps(results, indent=2))
        return 0
    fmt = lambda v: "-" if v is None else f"{v / 60:.1f} min"
    if results["coverage"]:
        print(f"Coverage, defaults, {a.minutes:g} simulated minutes per link:\n")
        print("| link | series | all measured once by | longest wait for a reading | duty cycle |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for r in results["coverage"]:
            duty = "-" if r["duty_cycle"] is None else f"{r['duty_cycle']:.4f}"
            print(f"| {LINK_NAMES[r['link']]} | {r['planned']} | {fmt(r['all_measured_s'])} | "
                  f"{fmt(r['longest_wait_s'])} | {duty} |")
    if results["recovery"]:
        s = lambda v: "-" if v is None else f"{v:.0f} s"
        print(f"\nA fault for {a.hold_minutes:g} minutes after {a.learn_minutes:g} healthy ones, "
              "defaults (simulated seconds):\n")
        print("| link | fault | DEGRADED after: metrics / status / health | ok after removal: "
              "metrics / status / health | bound |")
        print("| --- | --- | --- | --- | ---: |")
        for r in results["recovery"]:
            on, off = r["degraded_after_s"], r["ok_after_s"]
            print(f"| {LINK_NAMES[r['link']]} | {r['fault']} | "
                  f"{s(on.get('metrics'))} / {s(on.get('status'))} / {s(on.get('health'))} | "
                  f"{s(off.get('metrics'))} / {s(off.get('status'))} / {s(off.get('health'))} | "
                  f"{s(r.get('bound_s'))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
