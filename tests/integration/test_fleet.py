"""The fleet, end to end: a dozen simulated xferd daemons on loopback, some with injected
faults, scraped through file_sd by the real Prometheus from Debian with the shipped rules.
After a few cycles exactly the faulty daemons alert, each with the alert its fault calls
for, and every query of every dashboard panel returns data.

The rules are the shipped file with only the `for:` durations shortened (minutes would not
fit a test); every expression is the shipped one, unchanged.
"""
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from dashboard_queries import DASHBOARDS, load, panel_queries
from deploy_support import RULES_FILE, free_port, require_binary, require_tool

TEST_FOR = "4s"

# name -> (extra TOML for the daemon, the alerts it must raise); the rest are healthy.
FAULTS = {
    "degraded-a": ('[[simulate.fault]]\nkind = "degrade"\nfactor = 0.4\n',
                   {"XferdBandwidthBelowExpected"}),
    "degraded-b": ('[[simulate.fault]]\nkind = "degrade"\nfactor = 0.5\ndevice = 1\n',
                   {"XferdBandwidthBelowExpected"}),
    "downtrained": ('[[simulate.fault]]\nkind = "downtrain"\ngen = 4\nwidth = 4\n',
                    {"XferdPcieLinkDowntrained"}),
    "failing": ('[[simulate.fault]]\nkind = "error_every"\nevery = 2\n',
                {"XferdProbesFailing"}),
}
HEALTHY = [f"healthy-{i}" for i in range(8)]
DEVICES = {"degraded-b": 2, "healthy-0": 2}  # a few hosts with two GPUs


def daemon_config(name, port, state_dir, seed):
    extra = FAULTS.get(name, ("", set()))[0]
    return f"""
[web]
listen_address = "127.0.0.1:{port}"

[daemon]
state_dir = "{state_dir}"
log_level = "warn"

[probe]
interval = "1s"
jitter = 0
sizes = ["16MiB"]
iterations = 5
warmup = 1
deadline = "800ms"
cycle_budget = "900ms"
max_duty_cycle = 1

[busy]
enabled = false

[health]
consecutive_bad = 2

[simulate]
enabled = true
devices = {DEVICES.get(name, 1)}
seed = {seed}
time_scale = 0
{extra}"""


def shortened_rules(dst):
    """The shipped rules with `for:` cut to TEST_FOR; expressions untouched."""
    text = RULES_FILE.read_text()
    short = re.sub(r"(?m)^(\s+for:) \S+$", rf"\1 {TEST_FOR}", text)
    a, b = yaml.safe_load(text), yaml.safe_load(short)
    for ga, gb in zip(a["groups"], b["groups"]):
        for ra, rb in zip(ga["rules"], gb["rules"]):
            assert ra["expr"] == rb["expr"]
            ra.pop("for", None), rb.pop("for", None)
    assert a == b, "only for: may differ from the shipped rules"
    dst.write_text(short)


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(what, predicate, timeout, interval=0.5, describe=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError as e:  # not listening yet
            last = e
        time.sleep(interval)
    seen = describe() if describe else last
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last seen: {seen!r})")


class Fleet:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.procs = []
        self.targets = {}  # name -> "127.0.0.1:port"

    def start_daemons(self, binary):
        for seed, name in enumerate(list(FAULTS) + HEALTHY, start=1):
            port = free_port()
            state = self.tmp / "state" / name
            state.mkdir(parents=True)
            cfg = self.tmp / f"{name}.toml"
            cfg.write_text(daemon_config(name, port, state, seed))
            log = open(self.tmp / f"{name}.log", "w")
            self.procs.append((name, subprocess.Popen(
                [str(binary), "run", "--config", str(cfg)], stdout=log,
                stderr=subprocess.STDOUT)))
            self.targets[name] = f"127.0.0.1:{port}"

    def start_prometheus(self, prometheus):
        rules = self.tmp / "xferd.rules.yml"
        shortened_rules(rules)
        sd = self.tmp / "targets"
        sd.mkdir()
        (sd / "xferd.json").write_text(json.dumps(
            [{"targets": [t], "labels": {"host": n}} for n, t in self.targets.items()]))
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "xferd", "file_sd_configs": [
                {"files": [str(sd / "*.json")], "refresh_interval": "1s"}]}],
        }))
        self.prom_port = free_port()
        log = open(self.tmp / "prometheus.log", "w")
        self.procs.append(("prometheus", subprocess.Popen(
            [prometheus, f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.prom_port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)))
        self.api = f"http://127.0.0.1:{self.prom_port}/api/v1"

    def check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None:
                log = (self.tmp / f"{name}.log").read_text()[-3000:]
                pytest.fail(f"{name} exited with {p.returncode}:\n{log}")

    def query(self, expr):
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": expr})
        body = get_json(url, timeout=10)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def alerts(self):
        return get_json(f"{self.api}/alerts")["data"]["alerts"]

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    binary = require_binary()
    prometheus = require_tool("prometheus")
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        f.start_daemons(binary)
        for name, target in f.targets.items():
            wait_until(f"{name} to serve /metrics",
                       lambda t=target: urllib.request.urlopen(
                           f"http://{t}/metrics", timeout=2).status == 200, 30)
        f.start_prometheus(prometheus)
        wait_until("prometheus to be ready", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{f.prom_port}/-/ready", timeout=2).status == 200, 60)
        wait_until("every target up", lambda: len(f.query('up{job="xferd"} == 1')) ==
                   len(f.targets), 60)
        yield f
    finally:
        f.stop()
        if hasattr(f, "tmp"):
            shutil.rmtree(f.tmp / "tsdb", ignore_errors=True)


def firing_by_host(alerts):
    hosts = {}
    for a in alerts:
        if a["state"] == "firing" and a["labels"]["alertname"].startswith("Xferd"):
            hosts.setdefault(a["labels"].get("host", a["labels"]["instance"]), set()).add(
                a["labels"]["alertname"])
    return hosts


def test_exactly_the_faulty_daemons_alert(fleet):
    expected = {name: alerts for name, (_, alerts) in FAULTS.items()}
    by_instance = {t: n for n, t in fleet.targets.items()}
    seen_on_healthy = []
    last_firing = {}

    def settled():
        fleet.check_alive()
        alerts = fleet.alerts()
        for a in alerts:
            host = by_instance.get(a["labels"].get("instance"))
            if host in HEALTHY:
                seen_on_healthy.append((host, a["labels"]["alertname"], a["state"]))
        firing = {}
        for a in alerts:
            if a["state"] == "firing":
                firing.setdefault(by_instance[a["labels"]["instance"]], set()).add(
                    a["labels"]["alertname"])
        last_firing.clear()
        last_firing.update(firing)
        ok = set(firing) == set(expected) and all(
            expected[h] <= firing[h] for h in expected)
        return firing if ok else None

    firing = wait_until("exactly the faulty daemons to alert", settled, timeout=120,
                        interval=1, describe=lambda: {"expected": expected,
                                                      "firing": dict(last_firing)})
    # Keep watching a little: nothing healthy may start alerting either.
    time.sleep(8)
    firing = settled() or firing_by_host(fleet.alerts())
    print("firing:", {h: sorted(a) for h, a in sorted(firing.items())})
    assert set(firing) == set(FAULTS), firing
    for host, alerts in expected.items():
        assert alerts <= firing[host], (host, firing[host])
    assert not [s for s in seen_on_healthy if s[2] == "firing"], seen_on_healthy

    # The labels an operator routes on are there.
    a = next(a for a in fleet.alerts() if a["labels"]["alertname"] == "XferdBandwidthBelowExpected")
    assert {"instance", "gpu", "mode", "direction", "severity"} <= set(a["labels"])
    assert a["annotations"]["summary"] and "Check:" in a["annotations"]["description"]
    # degraded-b has its fault on GPU 1 only: GPU 0 of that host stays quiet.
    b = fleet.targets["degraded-b"]
    gpus = {x["labels"]["gpu"] for x in fleet.alerts()
            if x["labels"]["instance"] == b and x["state"] == "firing"}
    assert gpus == {"1"}, gpus


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_dashboard_query_returns_data(fleet, name):
    doc = load(name)
    # All of every variable, as Grafana sends it for "All" with allValue ".+".
    values = {v["name"]: ".+" for v in doc["templating"]["list"]}
    values["datasource"] = "prometheus"
    # Wait until the faults have shown (some panels list only what is wrong).
    wait_until("alerts to fire", lambda: firing_by_host(fleet.alerts()), 120, 1)
    empty = []
    for title, ref, _instant, expr in panel_queries(doc, values):
        result = fleet.query(expr)
        if not result:
            empty.append(f"{title} [{ref}]: {expr}")
    assert not empty, "panel queries without data:\n" + "\n".join(empty)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_variable_queries_return_values(fleet, name):
    doc = load(name)
    for v in doc["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"]["query"])
        assert m, v["query"]["query"]
        selector = m.group(1).replace("$instance", ".+")
        url = f"{fleet.api}/label/{m.group(2)}/values?" + urllib.parse.urlencode(
            {"match[]": selector})
        values = get_json(url)["data"]
        assert values, f"{name}: variable {v['name']} has no values"


def test_series_per_gpu_within_budget(fleet):
    # The figure docs/operations.md sizes a fleet's Prometheus with.
    gpus = len(fleet.query("xferd_device_info"))
    series = fleet.query('count({job="xferd",gpu!=""})')
    per_gpu = float(series[0]["value"][1]) / gpus
    print(f"{gpus} GPUs, {per_gpu:.0f} series per GPU")
    assert per_gpu <= 300
