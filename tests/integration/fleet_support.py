"""Shared pieces of the tests that run simulated xferd daemons under the real Prometheus from
Debian with the shipped rules (test_fleet.py, test_two_tier.py): daemon configs, the rules
with shortened `for:`, processes that are always torn down, the HTTP API, polling."""
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from deploy_support import RULES_FILE, free_port, require_binary, require_tool

# What every `for:` of the shipped rules becomes: minutes would not fit a test.
TEST_FOR = "4s"


def daemon_config(port, state_dir, seed, devices=1, probe="", simulate="", profile="full"):
    """A fast simulated daemon on 127.0.0.1:port. `probe` and `simulate` are extra TOML
    lines for those sections (a [[simulate.fault]] block goes in `simulate`); `profile`
    the metrics profile it exports."""
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
{probe}
[busy]
enabled = false

[health]
consecutive_bad = 2

[metrics]
profile = "{profile}"

[simulate]
enabled = true
devices = {devices}
seed = {seed}
time_scale = 0
{simulate}"""


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


class Processes:
    """Every process a test starts, each logging to NAME.log in `tmp`; stop() ends them all
    by their own handles, the last started first (SIGTERM, then SIGKILL after 10 s), so a
    Prometheus agent still finds the server it flushes to on its way out."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []  # (name, Popen, log file)

    def start(self, name, argv, env=None):
        log = open(self.tmp / f"{name}.log", "w")
        p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                             env=env)
        self.procs.append((name, p, log))
        return p

    def check_alive(self):
        for name, p, _ in self.procs:
            if p.poll() is not None:
                log = (self.tmp / f"{name}.log").read_text()[-3000:]
                pytest.fail(f"{name} exited with {p.returncode}:\n{log}")

    def stop(self):
        for _, p, log in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()


def start_daemons(procs, binary, hosts):
    """Starts one simulated daemon per host; hosts: {name: dict of daemon_config keyword
    arguments}. Returns {name: "127.0.0.1:port"} once every one serves /metrics."""
    targets = {}
    for seed, (name, options) in enumerate(hosts.items(), start=1):
        port = free_port()
        state = procs.tmp / "state" / name
        state.mkdir(parents=True)
        cfg = procs.tmp / f"{name}.toml"
        cfg.write_text(daemon_config(port, state, seed, **options))
        procs.start(name, [binary, "run", "--config", cfg])
        targets[name] = f"127.0.0.1:{port}"
    for name, target in targets.items():
        wait_until(f"{name} to serve /metrics",
                   lambda t=target: urllib.request.urlopen(
                       f"http://{t}/metrics", timeout=2).status == 200, 30)
    return targets


class Prometheus:
    """The HTTP API of one Prometheus started by start_prometheus()."""

    def __init__(self, port):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.api = f"{self.base}/api/v1"

    def wait_ready(self, procs, timeout=60):
        def ready():
            procs.check_alive()
            return urllib.request.urlopen(f"{self.base}/-/ready", timeout=2).status == 200
        wait_until(f"prometheus on :{self.port} to be ready", ready, timeout)

    def query(self, expr):
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": expr})
        body = get_json(url, timeout=10)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def alerts(self):
        return get_json(f"{self.api}/alerts")["data"]["alerts"]

    def label_values(self, label, selector):
        url = f"{self.api}/label/{label}/values?" + urllib.parse.urlencode({"match[]": selector})
        return get_json(url)["data"]


def start_prometheus(procs, name, prometheus, config, *flags):
    """Starts Debian's prometheus with `config` (a dict, written as NAME.yml) on a free
    loopback port; `flags` are extra command-line flags (storage, features)."""
    path = procs.tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    procs.start(name, [prometheus, f"--config.file={path}",
                       f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *flags])
    return Prometheus(port)


def serve(make, up, what, data_dirs):
    """A module fixture's body for a setup of daemons and Prometheus servers. make() builds it
    (an object with .tmp, .procs, .targets and start(binary, prometheus)) once the built xferd
    and Debian's prometheus are found; it is started and handed to the tests once up(setup)
    counts every target up (waiting for `what`). Its processes are stopped and its Prometheus
    data_dirs (under .tmp) removed at the end, however it went."""
    binary = require_binary()
    prometheus = require_tool("prometheus")
    setup = make()
    try:
        setup.start(binary, prometheus)
        wait_until(what, lambda: up(setup) == len(setup.targets), 60)
        yield setup
    finally:
        setup.procs.stop()
        for d in data_dirs:
            shutil.rmtree(setup.tmp / d, ignore_errors=True)


def firing(alerts, by_instance):
    """{host name: {alert names}} of the firing xferd alerts; by_instance maps a target
    ("127.0.0.1:port") to its host name."""
    hosts = {}
    for a in alerts:
        if a["state"] == "firing" and a["labels"]["alertname"].startswith("Xferd"):
            host = by_instance.get(a["labels"].get("instance"), a["labels"].get("instance"))
            hosts.setdefault(host, set()).add(a["labels"]["alertname"])
    return hosts
