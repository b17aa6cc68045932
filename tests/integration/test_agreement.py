"""`xferd check-config`, `xferd probe` and `xferd run` agree on every good config: the same
GPUs, the same expected bands, the same probes and the same verdict rules. `xferd probe
--concurrent` and `xferd run` agree on a multi-GPU host: the same concurrent groups, the
same expected aggregates, the same verdict on each and the same shared_uplink causes.

Each command is the real binary on the simulated device, and what is compared is what each
shows a user: check-config's resolved plan (--json), probe's results (--json) and what run
exports on /metrics. The corpus is the shipped config and tests/data/good-configs, which
include a sim UUID written in upper case in [probe] gpus and in [[health.band]]; the
multi-GPU host is the simulated 8-GPU node of tests/data/sysfs/hgx-8gpu (4 switches, 2 GPUs
behind each), healthy and with the two GPUs of one switch slowed to half.
"""
import json
import math
import re
import subprocess

import pytest

from xferd_harness import BINARY, SOURCE_DIR, Daemon

CORPUS = [SOURCE_DIR / "deploy" / "xferd.toml"] + sorted(
    (SOURCE_DIR / "tests" / "data" / "good-configs").glob("*.toml"))
HGX = SOURCE_DIR / "tests" / "data" / "sysfs" / "hgx-8gpu"


def xferd(*args):
    return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=300)


def size_label(size_bytes):
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size_bytes % unit == 0:
            return f"{size_bytes // unit}{name}"
    return f"{size_bytes}B"


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9)


def every_probe_in_the_first_cycle(text):
    """The config with max_duty_cycle = 1: the daemon's allowance then pays for every
    planned probe in its first cycle (at the default 0.0025 the first cycle runs the
    headline and the rest rotate in over half an hour). Nothing compared here depends on it."""
    if re.search(r"^max_duty_cycle\s*=", text, flags=re.M):
        return re.sub(r"^max_duty_cycle\s*=.*$", "max_duty_cycle = 1.0", text, flags=re.M)
    if re.search(r"^\[probe\]", text, flags=re.M):
        return re.sub(r"^\[probe\]\s*$", "[probe]\nmax_duty_cycle = 1.0", text, count=1, flags=re.M)
    return "[probe]\nmax_duty_cycle = 1.0\n" + text


def test_the_corpus_holds_the_cases_the_agreement_is_about():
    texts = {p.name: p.read_text() for p in CORPUS}
    assert len(CORPUS) >= 6
    upper = texts["upper-case-uuid.toml"]
    assert 'gpus = ["SIM-E9FD6049' in upper and 'gpu = "SIM-E9FD6049' in upper
    assert any('kind = "degrade"' in t for t in texts.values())


@pytest.mark.parametrize("config", CORPUS, ids=lambda p: p.name)
def test_check_config_probe_and_run_agree(tmp_path, config):
    # check-config: the plan, resolved on the simulated device as `run --simulate` sees it.
    r = xferd("check-config", "--json", "--simulate", config)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    planned = {(p["mode"], p["direction"], p["size_bytes"]): p["held_to_band"]
               for p in plan["probes"]}
    assert planned, "the plan has no probes"

    # probe: one run of every planned probe (fewer iterations: they do not change the plan).
    r = xferd("probe", "--simulate", "--json", "--iterations", 3, "--warmup", 0, "-c", config)
    assert r.returncode in (0, 1), r.stderr
    probed = json.loads(r.stdout)

    # run: the daemon, until its first cycle is done.
    d = Daemon(tmp_path, every_probe_in_the_first_cycle(config.read_text()), args=["--simulate"])
    d.start()
    try:
        d.wait_ready(timeout=120)
        m = d.metrics()
    finally:
        assert d.stop() == 0, d.log()[-3000:]

    def samples(name):
        return [(dict(labels), v) for (n, labels), v in m.items() if n == name]

    # The same GPUs, in the order the config names them.
    gpus_check = [(g["index"], g["uuid"]) for g in plan["devices"]]
    gpus_probe = [(g["index"], g["uuid"]) for g in probed["devices"]]
    gpus_run = sorted((int(l["gpu"]), l["uuid"]) for l, _ in samples("xferd_device_info"))
    assert gpus_check == gpus_probe, (gpus_check, gpus_probe)
    assert sorted(gpus_check) == gpus_run, (gpus_check, gpus_run)

    # The same band on each GPU.
    for check_gpu, probe_gpu in zip(plan["devices"], probed["devices"]):
        gpu = str(check_gpu["index"])
        band = check_gpu["expected_band"]
        assert close(band["lower_bytes_per_s"], probe_gpu["expected_band"]["lower_bytes_per_s"])
        assert close(band["upper_bytes_per_s"], probe_gpu["expected_band"]["upper_bytes_per_s"])
        assert band["source"] == probe_gpu["expected_band"]["source"]
        for bound in ("lower", "upper"):
            exported = m[("xferd_expected_bandwidth_bytes_per_second",
                          frozenset({"gpu": gpu, "bound": bound}.items()))]
            assert close(exported, band[f"{bound}_bytes_per_s"]), (gpu, bound, exported, band)

    # The same probes on each GPU, and the same rule for which of them the band judges.
    degraded_run = {(l["gpu"], l["mode"], l["direction"]): v
                    for l, v in samples("xferd_bandwidth_degraded")}
    for index, _ in gpus_check:
        gpu = str(index)
        results = [x for x in probed["results"] if x["gpu"] == index]
        assert {(x["mode"], x["direction"], x["size_bytes"]) for x in results} == set(planned)
        ran = {(l["mode"], l["direction"], l["size"])
               for l, _ in samples("xferd_bandwidth_bytes_per_second") if l["gpu"] == gpu}
        assert ran == {(mo, di, size_label(s)) for mo, di, s in planned}, gpu
        below_probe = set()
        for x in results:
            held = planned[(x["mode"], x["direction"], x["size_bytes"])]
            assert x["status"] == "ok", x
            assert (x["verdict"] in ("ok", "below band")) == held, (x["verdict"], held, x)
            if x["verdict"] == "below band":
                below_probe.add((x["mode"], x["direction"]))
        # After one cycle run's verdict is below band exactly where probe's is, when the
        # config judges after one bad cycle; with more cycles to go it is still ok.
        degraded = {(mo, di) for (g, mo, di), v in degraded_run.items() if g == gpu and v == 1}
        assert {(mo, di) for (g, mo, di) in degraded_run if g == gpu} == \
            {(mo, di) for mo, di, _ in planned}
        if plan["verdict"]["consecutive_bad"] == 1:
            assert degraded == below_probe, (gpu, degraded, below_probe)
        else:
            assert degraded == set(), degraded

    if config.name == "degraded-link.toml":
        held_pairs = {(mo, di) for (mo, di, _), held in planned.items() if held}
        assert held_pairs and below_probe == held_pairs
        assert ("pageable", "h2d") not in held_pairs and ("managed_prefetch", "d2h") not in held_pairs
    if config.name == "upper-case-uuid.toml":
        assert gpus_check == [(0, "SIM-e9fd6049-d65a-f21e-5775-264a9a7e1b09")]
        assert plan["devices"][0]["expected_band"]["source"] == "config"
        assert close(plan["devices"][0]["expected_band"]["lower_bytes_per_s"], 18e9)


def concurrent_config(slow_switch):
    """The 8-GPU node, pinned only, each cycle's groups due at once; with `slow_switch` the
    GPUs behind uplink_0000:38:00.0 (2 and 3) move half their bytes."""
    faults = "".join(f"""
[[simulate.fault]]
kind = "degrade"
device = {gpu}
factor = 0.5
""" for gpu in ((2, 3) if slow_switch else ()))
    return f"""
[probe]
interval = "5s"
jitter = 0
modes = ["pinned"]
iterations = 3
warmup = 0
max_duty_cycle = 1.0
concurrent_interval = "5s"

[busy]
enabled = false

[simulate]
enabled = true
time_scale = 0
sysfs_root = "{HGX}"
{faults}"""


@pytest.mark.parametrize("slow_switch", [False, True], ids=["healthy", "slow-switch"])
def test_probe_concurrent_and_run_agree(tmp_path, slow_switch):
    text = concurrent_config(slow_switch)
    config = tmp_path / "concurrent.toml"
    config.write_text(text)

    # probe --concurrent: each GPU alone, then every group at once.
    r = xferd("probe", "--concurrent", "--json", "-c", config)
    assert r.returncode == (1 if slow_switch else 0), r.stderr
    probed = json.loads(r.stdout)
    groups = {g["name"]: g for g in probed["groups"]}
    assert len(groups) == 5, list(groups)

    # run: the daemon, until every group has run each direction.
    d = Daemon(tmp_path / "run", text)
    d.start()
    try:
        d.wait_ready(timeout=120)
        d.wait_for(lambda: len([k for k in d.metrics() if k[0] ==
                                "xferd_host_aggregate_bandwidth_bytes_per_second"]) == 5 * 3,
                   timeout=120, what="the aggregates of 5 groups in 3 directions")
        m = d.metrics()
    finally:
        assert d.stop() == 0, d.log()[-3000:]

    def samples(name):
        return [(dict(labels), v) for (n, labels), v in m.items() if n == name]

    def value(name, **labels):
        return m[(name, frozenset(labels.items()))]

    # The same groups, members and shared links.
    info = {l["group"]: (l["gpus"], l["shared_link"])
            for l, _ in samples("xferd_concurrent_group_info")}
    assert info == {name: (",".join(map(str, g["gpus"])), g["shared_link"])
                    for name, g in groups.items()}

    below = set()
    for name, g in groups.items():
        # The same expected aggregate.
        band = g["expected_band"]
        for bound in ("lower", "upper"):
            exported = value("xferd_host_aggregate_expected_bandwidth_bytes_per_second",
                             group=name, bound=bound)
            assert close(exported, band[f"{bound}_bytes_per_s"]), (name, bound, exported, band)
        # The same rule for which aggregates the band holds, and the same verdict on each.
        for run in g["runs"]:
            direction = run["direction"]
            if direction == "bidir":
                assert run["verdict"] == "n/a (both ways: not held to the band)", run
                continue
            aggregate = value("xferd_host_aggregate_bandwidth_bytes_per_second",
                              group=name, direction=direction)
            run_below = aggregate < band["lower_bytes_per_s"]
            assert run["verdict"] == ("below expected" if run_below else "ok"), \
                (name, direction, run["verdict"], aggregate, band)
            if run_below:
                below.add((name, direction))

    # The same shared_uplink causes.
    probe_causes = {x["gpu"] for x in probed["diagnoses"] if x["cause"] == "shared_uplink"}
    run_causes = {int(l["gpu"]) for l, v in samples("xferd_diagnosis")
                  if l["cause"] == "shared_uplink" and v == 1}
    assert probe_causes == run_causes == set(range(8)), (probe_causes, run_causes)

    # The slow switch's aggregate is below its band in both, and only that one.
    expected_below = ({("uplink_0000:38:00.0", "h2d"), ("uplink_0000:38:00.0", "d2h")}
                      if slow_switch else set())
    assert below == expected_below, below
