"""The expected band follows what a GPU's path carries when healthy (each link's capability,
the lower of its two ends' maxima), not the speed it trained to, end to end on the
simulated device:

  - a link trained down from the start (both ends Gen4 x16, running Gen4 x4) reads below
    its band with link_downtrained as the cause, in everything that shows a verdict:
    `xferd probe`'s exit status, xferd_bandwidth_degraded, /api/v1/status and its incident
    log, `xferd health`;
  - a link that slows down at idle to save power and comes back up while probed is healthy;
  - a path whose maximum cannot be read falls back to the link as trained, and says so once.
"""
import json
import re
import subprocess
from urllib.parse import urlparse

import pytest

from test_topology import tree_maker
from xferd_harness import BINARY, sim_config

GEN4X16 = 31.508e9
GEN4X8 = 15.754e9
# 4 MiB: held to the band from the first reading (smaller sizes only to their baseline).
BAND = ('"4MiB"',)
DOWN = {"kind": "downtrain", "gen": 4, "width": 4}
PINNED_H2D = dict(gpu="0", mode="pinned", direction="h2d")


def probe(tmp_path, text):
    """`xferd probe --json` and the table on `text`'s config: (exit status, JSON, table)."""
    cfg = tmp_path / "probe.toml"
    cfg.write_text(text)
    args = [BINARY, "probe", "--config", str(cfg)]
    out = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
    table = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == table.returncode, (out.stderr, table.stdout)
    return out.returncode, json.loads(out.stdout), table.stdout + table.stderr


def causes_of(items):
    return {c["cause"] for c in items}


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def health(d, *args):
    address = urlparse(d.url()).netloc
    r = subprocess.run([BINARY, "health", "--web.listen-address", address, *args],
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.strip()


def test_probe_fails_a_link_trained_down_from_the_start(tmp_path):
    rc, doc, table = probe(tmp_path, sim_config(sizes=BAND, faults=[DOWN]))
    assert rc == 1, table
    device = doc["devices"][0]
    band = device["expected_band"]
    # Held to what the link can carry, Gen4 x16, not the Gen4 x4 it trained to.
    assert band["lower_bytes_per_s"] == pytest.approx(0.63 * GEN4X16, rel=1e-3)
    assert band["source"].endswith(", trained Gen4 x4"), band["source"]
    verdicts = {(r["mode"], r["direction"]): r["verdict"] for r in doc["results"]}
    assert verdicts[("pinned", "h2d")] == "below band", verdicts
    assert "link_downtrained" in causes_of(device["diagnoses"])
    assert "19.85-26.15 GB/s per direction (link Gen4 x16 at" in table, table
    assert "below band" in table


def test_run_holds_a_link_trained_down_from_the_start_degraded(daemon):
    d = daemon(sim_config(sizes=BAND, faults=[DOWN])).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_bandwidth_degraded", default=0, **PINNED_H2D) == 1, 30,
               "pinned h2d to turn DEGRADED")
    # The GPU's band (no mode label; managed_prefetch h2d has its own series beside it).
    assert d.metrics()[("xferd_expected_bandwidth_bytes_per_second",
                        frozenset({"gpu": "0", "bound": "lower"}.items()))] == \
        pytest.approx(0.63 * GEN4X16, rel=1e-3)
    assert d.value("xferd_diagnosis", gpu="0", cause="link_downtrained") == 1
    s = status(d)
    gpu = s["gpus"][0]
    assert s["verdict"] == "degraded" and gpu["verdict"] == "degraded", s["summary"]
    assert s["summary"].startswith("DEGRADED gpu0 "), s["summary"]
    assert "link_downtrained" in causes_of(gpu["causes"])
    assert "trained Gen4 x4" in gpu["band"]["source"]
    assert gpu["link"]["pcie"]["downtrained"] is True
    # The incident log has it, with the cause.
    d.wait_for(lambda: status(d)["incidents"], 10, "the incident")
    incident = status(d)["incidents"][-1]
    assert incident["to"] == "degraded", incident
    assert {"mode": "pinned", "direction": "h2d"} in incident["series"], incident
    assert "link_downtrained" in causes_of(incident["causes"])
    rc, line = health(d)
    assert rc == 1 and re.match(r"DEGRADED XFERD-\d{3}/[a-z_]+ gpu0 ", line), line
    assert ": link_downtrained," in line, line
    assert health(d, "--cause", "link_downtrained")[0] == 1


def idle_saving(**config):
    """A simulated GPU whose Gen4 x16 link drops to Gen1 at idle, and comes back up under
    traffic, as PCIe power saving does."""
    return sim_config(busy="idle_link_gen = 1\n", **config)


def test_a_link_that_slows_down_at_idle_is_healthy(daemon, tmp_path):
    # Read at idle (check-config reads it without probing) the link shows Gen1 ...
    cfg = tmp_path / "idle.toml"
    cfg.write_text(idle_saving(sizes=BAND))
    out = subprocess.run([BINARY, "check-config", "--json", str(cfg)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    idle_band = json.loads(out.stdout)["devices"][0]["expected_band"]
    assert idle_band["source"].endswith(", trained Gen1 x16"), idle_band
    # ... and the band stays what the link can carry: Gen4 x16's.
    assert idle_band["lower_bytes_per_s"] == pytest.approx(0.63 * GEN4X16, rel=1e-3)

    # Read while probed it is back up: no link_downtrained, every reading ok.
    rc, doc, table = probe(tmp_path, idle_saving(sizes=BAND))
    assert rc == 0, table
    device = doc["devices"][0]
    assert "link_downtrained" not in causes_of(device["diagnoses"]), device["diagnoses"]
    own = device["link_path"]["links"][0]
    assert (own["current_gen"], own["current_width"]) == (4, 16), own
    assert "DOWNTRAINED" not in table

    d = daemon(idle_saving(sizes=BAND)).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True, default=0) >= 4, 30,
               "4 cycles")
    assert d.value("xferd_bandwidth_degraded", sum_all=True, gpu="0") == 0
    assert d.value("xferd_diagnosis", gpu="0", cause="link_downtrained", default=0) == 0
    assert d.value("xferd_pcie_link_generation", gpu="0", state="current") == 4
    s = status(d)
    assert s["verdict"] == "ok", s["summary"]
    assert health(d)[0] == 0


def unreadable_max_tree(root):
    """A Gen4 x16 GPU trained at x8 below a root port whose max_link_speed cannot be read."""
    t = tree_maker()
    tree = t.Tree(str(root))
    (root / "devices" / "pci0000:00").mkdir(parents=True)
    port = tree.add("pci0000:00", "0000:00:01.0", t.INTEL, t.BRIDGE, 0, (4, 8), (4, 16))
    tree.add(port, "0000:01:00.0", t.NVIDIA, t.GPU_3D, 0, (4, 8), (4, 16))
    (root / "devices" / "pci0000:00" / "0000:00:01.0" / "max_link_speed").unlink()
    return root


def test_a_maximum_that_cannot_be_read_falls_back_to_the_trained_link(daemon, tmp_path):
    tree = unreadable_max_tree(tmp_path / "sys")
    text = sim_config(sizes=BAND, busy=f'sysfs_root = "{tree}"\n')
    rc, doc, table = probe(tmp_path, text)
    band = doc["devices"][0]["expected_band"]
    assert band["lower_bytes_per_s"] == pytest.approx(0.63 * GEN4X8, rel=1e-3)
    assert band["source"] == "link Gen4 x8 as trained at 0000:01:00.0 (maximum unreadable)", band
    assert rc == 0, table
    assert "cannot be read, so the expected band follows the link as trained" in table

    d = daemon(text).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True, default=0) >= 4, 30,
               "4 cycles")
    assert d.log().count("the expected band follows the link as trained") == 1, "said once"
    assert status(d)["verdict"] == "ok"
