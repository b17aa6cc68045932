"""Multi-GPU hosts, end to end: the real binary on simulated GPUs taken from fake sysfs trees
(tests/data/sysfs): an HGX-like 8-GPU node (4 PCIe switches with 2 GPUs each, 2 NUMA
nodes, Gen5 x16) and an IGX-like board (a Gen5 x16 GPU behind a Gen4 x8 uplink).

`xferd run` finds the concurrent groups in the tree, probes them at once, exports what each
GPU got and the aggregates beside their expected bands, and diagnoses the shared uplinks;
`xferd probe --concurrent` finds the same groups. The series a host exports stay within the
documented budget; the test prints the figures docs/operations.md sizes a fleet with.
"""
import gzip
import json
import shutil
import subprocess
import time

import pytest

from xferd_harness import BINARY, SOURCE_DIR, parse_metrics

TREES = SOURCE_DIR / "tests" / "data" / "sysfs"
GEN5X16 = 63.015e9
GEN4X8 = 15.754e9
UPLINKS = {"uplink_0000:16:00.0": "0,1", "uplink_0000:38:00.0": "2,3",
           "uplink_0000:98:00.0": "4,5", "uplink_0000:b8:00.0": "6,7"}
# docs/metrics.md, "Series budget": per GPU, per concurrent group, per process.
BUDGET_PER_GPU, BUDGET_PER_GROUP, BUDGET_PER_PROCESS = 300, 10, 40


def config(tree, extra=""):
    return f"""
[probe]
interval = "300ms"
jitter = 0
iterations = 8
warmup = 1
max_duty_cycle = 1.0
concurrent_interval = "300ms"
{extra}
[busy]
enabled = false

[simulate]
enabled = true
time_scale = 0
sysfs_root = "{tree}"
"""


def samples(metrics, name, **labels):
    """{frozenset(labels): value} of the series of `name` that carry `labels`."""
    return {k[1]: v for k, v in metrics.items()
            if k[0] == name and all((n, v2) in k[1] for n, v2 in labels.items())}


def label(series_labels, name):
    return dict(series_labels)[name]


def wait_concurrent(d, groups):
    d.wait_for(lambda: len({label(k, "group") for k in samples(
        d.metrics(), "xferd_host_aggregate_bandwidth_bytes_per_second")}) == groups,
        what=f"aggregates of {groups} groups")
    return d.metrics()


def test_eight_gpu_node_groups_aggregates_and_shared_uplinks(daemon, tmp_path):
    d = daemon(config(TREES / "hgx-8gpu"))
    d.start()
    d.wait_ready()
    m = wait_concurrent(d, 5)

    info = {label(k, "group"): (label(k, "gpus"), label(k, "shared_link"))
            for k in samples(m, "xferd_concurrent_group_info")}
    assert info["host"] == ("0,1,2,3,4,5,6,7", "")
    for group, gpus in UPLINKS.items():
        assert info[group] == (gpus, group[len("uplink_"):] + " Gen5 x16")
    assert len(info) == 5

    # The host: four Gen5 x16 uplinks; each uplink group: one.
    for group in info:
        capacity = 4 * GEN5X16 if group == "host" else GEN5X16
        lower = m[("xferd_host_aggregate_expected_bandwidth_bytes_per_second",
                   frozenset({("group", group), ("bound", "lower")}))]
        upper = m[("xferd_host_aggregate_expected_bandwidth_bytes_per_second",
                   frozenset({("group", group), ("bound", "upper")}))]
        assert lower == pytest.approx(0.63 * capacity, rel=1e-3)
        assert upper == pytest.approx(0.83 * capacity, rel=1e-3)
        for direction in ("h2d", "d2h"):
            aggregate = m[("xferd_host_aggregate_bandwidth_bytes_per_second",
                           frozenset({("group", group), ("direction", direction)}))]
            assert lower <= aggregate <= upper, (group, direction, aggregate)

    # Each GPU gets half of what it gets alone: its switch's neighbour takes the rest.
    for gpu in range(8):
        solo = m[("xferd_bandwidth_bytes_per_second", frozenset(
            {("gpu", str(gpu)), ("mode", "pinned"), ("direction", "h2d"), ("size", "64MiB")}))]
        for k, v in samples(m, "xferd_concurrent_bandwidth_bytes_per_second",
                            gpu=str(gpu), direction="h2d").items():
            assert v / solo == pytest.approx(0.5, abs=0.03), (dict(k), v, solo)
        assert m[("xferd_diagnosis", frozenset({("gpu", str(gpu)),
                                                ("cause", "shared_uplink")}))] == 1
        assert [dict(labels)["host_link"] for name, labels in m
                if name == "xferd_device_info" and dict(labels).get("gpu") == str(gpu)] == ["pcie"]
        assert m[("xferd_pcie_link_generation",
                  frozenset({("gpu", str(gpu)), ("state", "narrowest")}))] == 5
    assert "concurrent uplink_0000:16:00.0 pinned h2d" in d.log()

    # The series a host exports, per GPU and in all, against the documented budget; and
    # what one scrape weighs, plain and gzip'd (as a scraper asking for gzip gets it).
    text = d.scrape()
    lines = [line for line in text.splitlines() if line.startswith("xferd_")]
    per_gpu = len([line for line in lines if 'gpu="0"' in line])
    budget = BUDGET_PER_GPU * 8 + BUDGET_PER_GROUP * 5 + BUDGET_PER_PROCESS
    plain, zipped = len(text.encode()), len(gzip.compress(text.encode(), 6))
    print(f"8-GPU host: {len(lines)} xferd_ series (budget {budget}), {per_gpu} with gpu=\"0\"; "
          f"one scrape {plain} bytes, {zipped} gzip'd")
    assert per_gpu <= BUDGET_PER_GPU
    assert len(lines) <= budget


def test_headline_histograms_profile_cuts_the_series(daemon):
    d = daemon(config(TREES / "hgx-8gpu", 'histograms = "headline"'))
    d.start()
    d.wait_ready()
    wait_concurrent(d, 5)
    text = d.scrape()
    lines = [line for line in text.splitlines() if line.startswith("xferd_")]
    hist = {(label(k, "mode"), label(k, "direction")) for k in samples(
        parse_metrics(text), "xferd_transfer_duration_seconds_count")}
    assert hist == {("pinned", "h2d"), ("pinned", "d2h")}
    # Every probe still has its bandwidth gauge.
    assert len(samples(parse_metrics(text), "xferd_bandwidth_bytes_per_second", gpu="0")) == 13
    plain, zipped = len(text.encode()), len(gzip.compress(text.encode(), 6))
    print(f"8-GPU host, histograms = \"headline\": {len(lines)} xferd_ series; one scrape "
          f"{plain} bytes, {zipped} gzip'd")
    assert len(lines) <= 160 * 8 + BUDGET_PER_GROUP * 5 + BUDGET_PER_PROCESS


def test_igx_board_is_held_to_its_gen4_x8_uplink(daemon):
    d = daemon(config(TREES / "igx-dgpu"))
    d.start()
    d.wait_ready()
    m = d.metrics()
    assert d.value("xferd_device_info", pci_bus_id="0005:03:00.0") == 1
    assert len(samples(m, "xferd_device_info")) == 1  # its audio function is no GPU
    assert d.value("xferd_pcie_link_generation", gpu="0", state="current") == 5
    assert d.value("xferd_pcie_link_width", gpu="0", state="narrowest") == 8
    # The GPU's band (no mode label; managed_prefetch h2d has its own series beside it).
    assert m[("xferd_expected_bandwidth_bytes_per_second",
              frozenset({"gpu": "0", "bound": "lower"}.items()))] == \
        pytest.approx(0.63 * GEN4X8, rel=1e-3)
    # One GPU: no concurrent group, and nothing wrong with it.
    assert not samples(m, "xferd_concurrent_group_info")
    assert not samples(m, "xferd_host_aggregate_bandwidth_bytes_per_second")
    assert d.value("xferd_diagnosis", gpu="0", cause="link_downtrained") == 0


def test_an_uplink_that_trains_down_is_held_to_what_it_can_carry(daemon, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(TREES / "hgx-8gpu", tree, symlinks=True)
    d = daemon(config(tree))
    d.start()
    d.wait_ready()
    wait_concurrent(d, 5)
    (tree / "bus/pci/devices/0000:38:00.0/current_link_width").write_text("4\n")
    group = "uplink_0000:38:00.0"
    d.wait_for(lambda: d.value("xferd_diagnosis", gpu="2", cause="link_downtrained",
                               default=0) == 1, what="the x4 uplink to be diagnosed")
    assert d.value("xferd_diagnosis", gpu="0", cause="link_downtrained") == 0
    # The group's shared link is named as it trained; its band, like each GPU's, stays what
    # the path carries when healthy (Gen5 x16 both ends), which the x4 link does not reach.
    d.wait_for(lambda: [label(k, "shared_link") for k in samples(
                   d.metrics(), "xferd_concurrent_group_info", group=group)] ==
               ["0000:38:00.0 Gen5 x4"], what="the group to name its x4 uplink")
    assert d.value("xferd_host_aggregate_expected_bandwidth_bytes_per_second", group=group,
                   bound="lower") == pytest.approx(0.63 * GEN5X16, rel=1e-3)
    assert d.value("xferd_host_aggregate_expected_bandwidth_bytes_per_second", group="host",
                   bound="upper") == pytest.approx(0.83 * GEN5X16 * 4, rel=1e-3)
    assert d.metrics()[("xferd_expected_bandwidth_bytes_per_second",
                        frozenset({"gpu": "2", "bound": "lower"}.items()))] == \
        pytest.approx(0.63 * GEN5X16, rel=1e-3)
    # The GPUs behind it read below that band: DEGRADED, the others not.
    d.wait_for(lambda: d.value("xferd_bandwidth_degraded", sum_all=True, gpu="2") >= 1,
               what="gpu 2 to turn DEGRADED")
    assert d.value("xferd_bandwidth_degraded", sum_all=True, gpu="0") == 0


def test_probe_and_run_find_the_same_groups(daemon):
    d = daemon(config(TREES / "hgx-8gpu"))
    d.start()
    d.wait_ready()
    m = wait_concurrent(d, 5)
    run_groups = {label(k, "group"): label(k, "gpus")
                  for k in samples(m, "xferd_concurrent_group_info")}
    out = subprocess.run([BINARY, "probe", "--simulate", "--concurrent", "--json",
                          "--iterations", "3", "--sysfs-root", str(TREES / "hgx-8gpu")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    probe_groups = {g["name"]: ",".join(map(str, g["gpus"]))
                    for g in json.loads(out.stdout)["groups"]}
    assert probe_groups == run_groups


def test_prometheus_memory_per_series(tmp_path):
    """The figure docs/operations.md sizes a central Prometheus with: its resident memory
    per head series, as the difference between scraping one simulated 8-GPU host and
    scraping six (Debian's Prometheus, 1 s scrapes, 30 s after each step)."""
    from deploy_support import require_binary, require_tool
    from fleet_support import Processes, get_json, start_daemons, start_prometheus, wait_until

    binary = require_binary()
    prometheus = require_tool("prometheus")
    procs = Processes(tmp_path)
    tree = TREES / "hgx-8gpu"
    try:
        hosts = {f"node-{i}": {"simulate": f'sysfs_root = "{tree}"',
                               "probe": 'concurrent_interval = "1s"'} for i in range(6)}
        targets = start_daemons(procs, binary, hosts)
        sd = tmp_path / "targets.json"
        sd.write_text(json.dumps([{"targets": [targets["node-0"]]}]))
        prom = start_prometheus(procs, "prometheus", prometheus, {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{"job_name": "xferd", "file_sd_configs": [
                {"files": [str(sd)], "refresh_interval": "1s"}]}]},
            f"--storage.tsdb.path={tmp_path / 'tsdb'}")
        prom.wait_ready(procs)
        pid = procs.procs[-1][1].pid

        def head_series():
            return get_json(f"{prom.api}/status/tsdb")["data"]["headStats"]["numSeries"]

        def rss():
            with open(f"/proc/{pid}/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f
                            if line.startswith("VmRSS:"))

        wait_until("one host's series in the head", lambda: head_series() > 2000, 60)
        time.sleep(30)
        one_series, one_rss = head_series(), rss()
        sd.write_text(json.dumps([{"targets": list(targets.values())}]))
        wait_until("six hosts' series in the head",
                   lambda: head_series() > 5.5 * one_series, 60)
        time.sleep(30)
        six_series, six_rss = head_series(), rss()
        per_series = (six_rss - one_rss) / (six_series - one_series)
        print(f"prometheus: {one_series} head series at {one_rss / 2**20:.0f} MiB RSS, "
              f"{six_series} at {six_rss / 2**20:.0f} MiB: {per_series:.0f} bytes per series")
        assert 0 < per_series < 64 * 1024
    finally:
        procs.stop()
