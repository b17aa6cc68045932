"""xferd joined with dcgm-exporter in the real Prometheus from Debian: a simulated xferd (2
GPUs, GPU 1 degraded, on node gpu-node-a) and, on a loopback HTTP server, the static
exposition tests/data/dcgm/dcgm-exporter.prom in dcgm-exporter's exact format (the same two
GPUs by UUID and bus id, and a decoy: GPU 0 of gpu-node-b at the same index and bus id).
Prometheus scrapes both with the shipped rules (`for:` shortened). The join documented in
docs/metrics.md, read from there, returns exactly GPU 1's DCGM series; xferd_gpu_info writes
UUID, pci_bus_id, device, modelName and Hostname as dcgm-exporter does; the fleet
dashboard's panel beside DCGM shows xferd's GPUs and only them. In each metrics profile.
"""
import http.server
import os
import re
import threading

import pytest

from dashboard_queries import load, panel_queries
from deploy_support import SOURCE_DIR, free_port
from fleet_support import (Processes, daemon_config, serve, shortened_rules, start_prometheus,
                           wait_until)

DCGM_FILE = SOURCE_DIR / "tests/data/dcgm/dcgm-exporter.prom"
NODE = "gpu-node-a"
DECOY_UUID = "GPU-3f1c8a52-7be4-4d19-a6f0-2c9e5b7d8a41"
DCGM_LABELS = ("UUID", "pci_bus_id", "device", "modelName", "Hostname")


def documented_join():
    """The one line of PromQL docs/metrics.md gives for the join."""
    text = (SOURCE_DIR / "docs/metrics.md").read_text()
    m = re.search(r"<!-- dcgm-join[^>]*-->\s*```promql\n(.+?)\n```", text, re.S)
    assert m, "docs/metrics.md has no dcgm-join block"
    (line,) = m.group(1).strip().splitlines()
    return line


class DcgmExporter:
    """dcgm-exporter's /metrics as a static file on a loopback port."""

    def __init__(self, path):
        body = path.read_bytes()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Setup:
    def __init__(self, tmp, profile):
        self.tmp = tmp
        self.profile = profile
        self.procs = Processes(tmp)
        self.dcgm = None

    def start(self, binary, prometheus):
        self.dcgm = DcgmExporter(DCGM_FILE)
        port = free_port()
        state = self.tmp / "state"
        state.mkdir()
        config = self.tmp / "xferd.toml"
        config.write_text(daemon_config(
            port, state, seed=1, devices=2, profile=self.profile,
            simulate='[[simulate.fault]]\nkind = "degrade"\nfactor = 0.4\ndevice = 1\n'))
        self.procs.start("xferd", [binary, "run", "--config", config],
                         env=dict(os.environ, NODE_NAME=NODE))
        self.xferd = f"127.0.0.1:{port}"
        self.targets = {"xferd": self.xferd, "dcgm-exporter": self.dcgm.target}
        rules = self.tmp / "xferd.rules.yml"
        shortened_rules(rules)
        self.prom = start_prometheus(self.procs, "prometheus", prometheus, {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "xferd", "static_configs": [{"targets": [self.xferd]}]},
                {"job_name": "dcgm-exporter",
                 "static_configs": [{"targets": [self.dcgm.target]}]}],
        }, f"--storage.tsdb.path={self.tmp / 'tsdb'}")
        self.prom.wait_ready(self.procs)

    def query(self, expr):
        self.procs.check_alive()
        return self.prom.query(expr)


@pytest.fixture(scope="module", params=["full", "fleet"])
def setup(tmp_path_factory, request):
    made = []

    def make():
        made.append(Setup(tmp_path_factory.mktemp(f"dcgm-{request.param}"), request.param))
        return made[0]

    try:
        yield from serve(make, lambda s: len(s.query("up == 1")), "both targets up", ["tsdb"])
    finally:
        if made and made[0].dcgm:
            made[0].dcgm.stop()


def sim_gpus(setup):
    """{gpu index: the labels of xferd_gpu_info}."""
    return {int(r["metric"]["gpu"]): r["metric"] for r in setup.query("xferd_gpu_info")}


def wait_for_verdict(setup):
    wait_until("GPU 1's verdict keyed by UUID", lambda: setup.query(
        "UUID:xferd_gpu_degraded:max == 1"), 90, 1)


def test_gpu_info_writes_the_labels_as_dcgm_exporter_does(setup):
    gpus = sim_gpus(setup)
    assert sorted(gpus) == [0, 1]
    dcgm = {r["metric"]["UUID"]: r["metric"]
            for r in setup.query(f'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{Hostname="{NODE}"}}')}
    for index, info in gpus.items():
        theirs = dcgm.get(info["UUID"])
        assert theirs, (f"GPU {index}: {info['UUID']} is not in {DCGM_FILE.name}: the "
                        "simulator's UUIDs changed, update the file")
        for label in DCGM_LABELS:
            assert info[label] == theirs[label], (index, label, info[label], theirs[label])
        assert info["hostname"] == NODE
        assert theirs["gpu"] == info["gpu"]  # the decoy's trap: the same index...
    decoy = setup.query(f'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{UUID="{DECOY_UUID}"}}')
    assert decoy[0]["metric"]["pci_bus_id"] == gpus[0]["pci_bus_id"]  # ...and bus id
    assert decoy[0]["metric"]["gpu"] == "0"


def test_the_documented_join_returns_exactly_the_degraded_gpu(setup):
    wait_for_verdict(setup)
    gpus = sim_gpus(setup)
    result = setup.query(documented_join())
    assert [(r["metric"]["UUID"], r["metric"]["Hostname"], r["value"][1]) for r in result] == [
        (gpus[1]["UUID"], NODE, "1732")], result
    # With the recording rule, the same.
    short = setup.query("DCGM_FI_DEV_PCIE_REPLAY_COUNTER and on (UUID) "
                        "(UUID:xferd_gpu_degraded:max == 1)")
    assert [r["metric"]["UUID"] for r in short] == [gpus[1]["UUID"]]
    # What the decoy is there for: a join on the index or on the bus id takes the other
    # node's GPU 0 beside this node's.
    wait_until("GPU 0 in the verdict", lambda: setup.query(
        'UUID:xferd_gpu_degraded:max == 0'), 30, 1)
    for label in ("gpu", "pci_bus_id"):
        naive = setup.query(
            f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER and on ({label}) (xferd_gpu_info and on "
            f"(instance, gpu) (max by (instance, gpu) (xferd_bandwidth_degraded) == 0))")
        assert DECOY_UUID in {r["metric"]["UUID"] for r in naive}, (label, naive)


def test_the_verdict_keyed_by_uuid(setup):
    wait_for_verdict(setup)
    gpus = sim_gpus(setup)
    verdicts = {r["metric"]["UUID"]: (r["metric"], r["value"][1])
                for r in setup.query("UUID:xferd_gpu_degraded:max")}
    assert set(verdicts) == {gpus[0]["UUID"], gpus[1]["UUID"]}
    assert verdicts[gpus[1]["UUID"]][1] == "1" and verdicts[gpus[0]["UUID"]][1] == "0"
    labels = verdicts[gpus[1]["UUID"]][0]
    for label in ("pci_bus_id", "modelName", "Hostname", "hostname"):
        assert labels[label] == gpus[1][label], label


def test_the_fleet_dashboard_shows_the_verdict_beside_dcgm(setup):
    wait_for_verdict(setup)
    gpus = sim_gpus(setup)
    doc = load("xferd-fleet.json")
    values = {v["name"]: ".+" for v in doc["templating"]["list"]}
    queries = {ref: expr for title, ref, _, expr in panel_queries(doc, values)
               if title == "xferd's verdict beside DCGM's PCIe counters"}
    assert set(queries) == {"A", "B", "C", "D"}
    by_uuid = {}
    for ref, expr in queries.items():
        rows = setup.query(expr)
        assert {r["metric"]["UUID"] for r in rows} == {gpus[0]["UUID"], gpus[1]["UUID"]}, \
            (ref, rows)
        for r in rows:
            by_uuid.setdefault(r["metric"]["UUID"], {})[ref] = float(r["value"][1])
    # The verdict, DCGM's replays and link generation, and xferd's own reading of it.
    assert by_uuid[gpus[1]["UUID"]] == {"A": 1, "B": 1732, "C": 3, "D": 4}
    assert by_uuid[gpus[0]["UUID"]] == {"A": 0, "B": 0, "C": 4, "D": 4}
