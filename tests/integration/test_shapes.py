"""The shapes fleets run, on the simulated device, end to end: a confidential-computing
node (never held to the PCIe band, the modes CC forbids skipped with the reason, a real
degrade still caught against the baseline, GPUs not ready: unknown), and a MIG node with
instances (probed through them, held to baselines where their copy engines are fewer than
the GPU's) and without (verdict unknown, named in the status API and `xferd health`, picked
up on reload). docs/health.md, "Confidential computing and MIG"."""
import contextlib
import json
import signal
import socket
import subprocess

from xferd_harness import BINARY, Daemon


def config_text(shape="", faults=(), listen=None):
    lines = [
        "[probe]", 'interval = "300ms"', "jitter = 0", 'sizes = ["64MiB"]', "iterations = 6",
        "warmup = 1", "max_duty_cycle = 1.0", "",
        "[health]", "consecutive_bad = 2", "",
        "[simulate]", "enabled = true", "devices = 2", "time_scale = 0", shape,
    ]
    for f in faults:
        lines.append("[[simulate.fault]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in f.items()]
    if listen:
        lines += ["[web]", f'listen_address = "{listen}"']
    return "\n".join(lines) + "\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(tmp_path, shape="", cycles=0):
    """`xferd run` on the simulated node of `shape`, once ready and `cycles` cycles in;
    stopped on leaving the block."""
    listen = f"127.0.0.1:{free_port()}"
    d = Daemon(tmp_path, config_text(shape, (), listen), listen=listen)
    try:
        d.start().wait_ready()
        if cycles:
            d.wait_for(lambda: status(d)["daemon"]["cycles"] >= cycles, 60, f"{cycles} cycles")
        yield d
    finally:
        d.stop()


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def health(d):
    r = subprocess.run([BINARY, "health", "--config", str(d.config_path)], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout.strip()


def probe(tmp_path, shape, *args):
    cfg = tmp_path / "probe.toml"
    cfg.write_text(config_text(shape))
    r = subprocess.run([BINARY, "probe", "-c", str(cfg), "--json", *args], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, json.loads(r.stdout)


def rows(doc, gpu=0):
    return {(r["mode"], r["direction"]): r for r in doc["results"] if r["gpu"] == gpu}


def test_a_cc_node_is_never_held_to_the_pcie_band(tmp_path):
    rc, doc = probe(tmp_path, "confidential_computing = true")
    assert rc == 0
    dev = doc["devices"][0]
    assert dev["shape"]["confidential_computing"]["state"] == "on"
    assert dev["expected_band"]["source"].startswith("confidential computing on: bounce-buffered")
    r = rows(doc)
    # Bounce-buffered rates, far under the Gen4 x16 band (19.85 GB/s), and not judged by it.
    assert r["pinned", "h2d"]["median_bytes_per_s"] < 10e9
    assert r["pinned", "h2d"]["verdict"] == "n/a (confidential computing: baseline only)"
    for mode in ("zero_copy", "managed", "managed_prefetch"):
        assert r[mode, "h2d"]["status"] == "unsupported"
        assert "confidential computing on" in r[mode, "h2d"]["message"]
    assert r["pinned", "bidir"]["status"] == "unsupported"
    assert "nvbandwidth" in r["pinned", "bidir"]["message"]
    assert not any(c["cause"] == "pinned_pageable_ratio" for c in dev["diagnoses"])
    cc = subprocess.run([BINARY, "check-config", "--json", str(tmp_path / "probe.toml")],
                        capture_output=True, text=True, timeout=60)
    assert json.loads(cc.stdout)["confidential_computing"]["state"] == "on"

    with running(tmp_path / "run", "confidential_computing = true", cycles=4) as d:
        st = status(d)
        assert [g["verdict"] for g in st["gpus"]] == ["ok", "ok"], st["summary"]
        assert st["gpus"][0]["shape"]["confidential_computing"]["state"] == "on"
        assert d.value("xferd_bandwidth_degraded", default=0, sum_all=True) == 0
        assert "xferd_expected_bandwidth_bytes_per_second{" not in d.scrape()
        assert d.value("xferd_probe_runs_total", gpu="0", mode="zero_copy",
                       result="unsupported") >= 1
        assert health(d)[0] == 0


def test_a_degrade_under_cc_is_caught_against_the_baseline(tmp_path):
    with running(tmp_path, "confidential_computing = true") as d:
        # Five healthy cycles teach the baselines (docs/health.md, "Baseline").
        d.wait_for(lambda: d.value("xferd_bandwidth_baseline_bytes_per_second", gpu="0",
                                   mode="pinned", direction="h2d", size="64MiB") is not None
                   and status(d)["daemon"]["cycles"] >= 7, 60, "learned baselines")
        d.write_config(config_text("confidential_computing = true",
                                   [{"kind": "degrade", "device": 0, "factor": 0.5}],
                                   f"127.0.0.1:{d.port}"))
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == "degraded", 60, "gpu0 degraded")
        st = status(d)
        assert st["gpus"][1]["verdict"] == "ok"
        causes = {c["cause"] for c in st["gpus"][0]["causes"]}
        assert "below_baseline" in causes and "below_band" not in causes, causes
        code, line = health(d)
        assert code == 1 and line.startswith("DEGRADED"), line


def test_cc_gpus_not_ready_are_unknown_never_degraded(tmp_path):
    cc_not_ready = "confidential_computing = true\nconfidential_computing_ready = false"
    with running(tmp_path, cc_not_ready, cycles=3) as d:
        st = status(d)
        assert st["verdict"] == "unknown"
        assert "not ready for work" in st["gpus"][0]["verdict_reason"]
        code, line = health(d)
        assert code == 2 and "verdict unknown" in line and "not ready" in line, line


def test_a_mig_gpu_is_probed_through_its_instances(tmp_path):
    shape = '[[simulate.mig]]\ndevice = 0\ninstances = ["3g.71gb", "3g.71gb"]'
    rc, doc = probe(tmp_path, shape, "--mode", "pinned")
    assert rc == 0
    gpu0, gpu1 = rows(doc, 0), rows(doc, 1)
    # Three of the GPU's seven copy engines: no figure says they fill the link.
    assert gpu0["pinned", "h2d"]["verdict"] == "n/a (MIG instance's copy engines: baseline only)"
    assert gpu0["pinned", "h2d"]["mig_instance"]["profile"] == "3g.71gb"
    assert gpu1["pinned", "h2d"]["verdict"] == "ok" and gpu1["pinned", "h2d"]["mig_instance"] is None
    mig = doc["devices"][0]["shape"]["mig"]
    assert mig["mode"] == "enabled"
    assert [i["gpu_instance_id"] for i in mig["instances"]] == [1, 2]
    assert [i["copy_engines"] for i in mig["instances"]] == [3, 3]
    # The whole GPU as one instance owns every copy engine: held to the link's band.
    rc, doc = probe(tmp_path, 'mig = ["7g.141gb"]', "--mode", "pinned")
    assert rows(doc, 0)["pinned", "h2d"]["verdict"] == "ok"

    with running(tmp_path / "run", shape, cycles=4) as d:
        st = status(d)
        assert [g["verdict"] for g in st["gpus"]] == ["ok", "ok"], st["summary"]
        instances = st["gpus"][0]["shape"]["mig"]["instances"]
        assert {i["profile"] for i in instances} == {"3g.71gb"}
        assert sum(i["last_probed"] for i in instances) == 1
        assert health(d)[0] == 0
        # Each instance an info series with dcgm-exporter's label names; the GPU's shape on
        # xferd_device_info; the bandwidth series stay the physical GPU's.
        for gi in ("1", "2"):
            assert d.value("xferd_mig_instance_info", gpu="0", GPU_I_ID=gi,
                           GPU_I_PROFILE="3g.71gb", copy_engines="3", probed="1") == 1
        assert d.value("xferd_device_info", gpu="0", mig="enabled",
                       confidential_computing="off") == 1
        assert d.value("xferd_device_info", gpu="1", mig="disabled") == 1
        assert "xferd_mig_instance_info{gpu=\"1\"" not in d.scrape()
        assert d.value("xferd_bandwidth_bytes_per_second", gpu="0", mode="pinned",
                       direction="h2d", size="64MiB") > 0


def test_mig_without_instance_is_unknown_and_picked_up_on_reload(tmp_path):
    with running(tmp_path, "[[simulate.mig]]\ndevice = 1\ninstances = []", cycles=3) as d:
        st = status(d)
        assert st["gpus"][0]["verdict"] == "ok"
        assert st["gpus"][1]["verdict"] == "unknown"
        assert st["gpus"][1]["verdict_reason"] == "MIG enabled, no GPU instance to probe through"
        assert d.value("xferd_bandwidth_degraded", gpu="1", default=0, sum_all=True) == 0
        code, line = health(d)
        assert code == 2, line
        assert "gpu1 verdict unknown: MIG enabled, no GPU instance to probe through" in line
        # An instance made later: the next reload probes through it.
        d.write_config(config_text('[[simulate.mig]]\ndevice = 1\ninstances = ["1g.18gb"]',
                                   listen=f"127.0.0.1:{d.port}"))
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: status(d)["gpus"][1]["verdict"] == "ok", 60, "gpu1 judged")
        assert d.alive()
        assert health(d)[0] == 0
        assert d.value("xferd_mig_instance_info", gpu="1", GPU_I_PROFILE="1g.18gb") == 1


def test_bad_shapes_in_the_config_name_the_fix(tmp_path):
    for shape, words in [
        ('mig = ["3x.71gb"]', "not a MIG profile"),
        ('mig = ["4g.71gb", "4g.71gb"]', "a GPU has 7"),
        ("confidential_computing_ready = false", "add confidential_computing = true"),
        ('[[simulate.mig]]\ndevice = 5\ninstances = []', "names device 5"),
    ]:
        cfg = tmp_path / "bad.toml"
        cfg.write_text(config_text(shape))
        r = subprocess.run([BINARY, "probe", "-c", str(cfg)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 78, (shape, r.stderr)
        assert words in r.stderr, (shape, r.stderr)


def test_the_series_budget_holds_on_every_shape(tmp_path):
    """At most 300 series per GPU with the shipped probes (docs/metrics.md, "Series budget"):
    a MIG GPU of seven instances adds their info series, a CC GPU loses its skipped modes'."""
    for name, shape in [("mig", 'mig = ["1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", '
                                '"1g.18gb", "1g.18gb", "1g.18gb"]'),
                        ("cc", "confidential_computing = true")]:
        with running(tmp_path / name, shape, cycles=3) as d:
            per_gpu = sum(1 for line in d.scrape().splitlines()
                          if not line.startswith("#") and 'gpu="0"' in line)
            assert 0 < per_gpu <= 300, (name, per_gpu)
            if name == "mig":
                assert d.value("xferd_mig_instance_info", gpu="0", GPU_I_ID="7") == 1
