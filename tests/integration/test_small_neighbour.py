"""A small neighbour on a narrow link, end to end on the simulated device: another process's
steady traffic, under the busy check's 2 GB/s but a tenth to a quarter of a Gen3 x4, Gen4
x4 or (an IGX's uplink) Gen4 x8 link, takes enough of it to push healthy readings to or
below the band.
The contention threshold scales with the link, so those probes are recognised as contended
(link_shared names it, the readings are neither judged nor learned) and no verdict turns
DEGRADED; on a Gen4 x16 link the threshold stays the configured 2 GB/s, and a probe alone
is never contended."""
import json
import subprocess
import time

import pytest

from xferd_harness import BINARY, SOURCE_DIR, sim_config

IGX = SOURCE_DIR / "tests" / "data" / "sysfs" / "igx-dgpu"

# (name, the [simulate] keys that give the link, the neighbour, what the link carries per
# direction, the threshold on it: a quarter of (1 - 0.63) of the link, at most 2 GB/s).
LINKS = [
    ("gen3x4", 'link = "gen3x4"', "1.0GB/s", 3.938e9, 0.364e9),
    ("gen4x4", 'link = "gen4x4"', "1.7GB/s", 7.877e9, 0.729e9),
    ("igx-gen4x8", f'sysfs_root = "{IGX}"', "1.7GB/s", 15.754e9, 1.457e9),
]


def config(link, neighbour=None):
    keys = link + "\n"
    if neighbour:
        keys += (f'foreign_traffic_bytes_per_second = "{neighbour}"\n'
                 "foreign_traffic_duty = 1\n")
    # 4 MiB, held to the band; a 1 s interval leaves the managed modes' deadlines room on
    # a Gen3 x4 link.
    return sim_config(interval="1s", sizes=('"4MiB"',), iterations=5, busy=keys)


def probe(tmp_path, text):
    cfg = tmp_path / "probe.toml"
    cfg.write_text(text)
    out = subprocess.run([BINARY, "probe", "--config", str(cfg), "--json"], capture_output=True,
                         text=True, timeout=120)
    return out.returncode, json.loads(out.stdout), out.stderr


@pytest.mark.parametrize("name,link,neighbour,rate,threshold", LINKS, ids=[c[0] for c in LINKS])
def test_probe_recognises_a_small_neighbour(tmp_path, name, link, neighbour, rate, threshold):
    rc, doc, err = probe(tmp_path, config(link, neighbour))
    assert rc == 0, err
    device = doc["devices"][0]
    assert device["foreign_traffic_threshold_bytes_per_s"] == pytest.approx(threshold, rel=0.01)
    assert device["expected_band"]["lower_bytes_per_s"] == pytest.approx(0.63 * rate, rel=1e-3)
    link_bound = [r for r in doc["results"] if r["mode"] == "pinned" and r["direction"] == "h2d"]
    assert link_bound, doc["results"]
    for r in link_bound:
        assert r["contention"]["state"] == "contended", r["contention"]
        assert r["verdict"].startswith("contended: "), r["verdict"]
    assert "link_shared" in {c["cause"] for c in device["diagnoses"]}


@pytest.mark.parametrize("name,link,neighbour,rate,threshold", LINKS, ids=[c[0] for c in LINKS])
def test_run_never_turns_degraded_beside_a_small_neighbour(daemon, name, link, neighbour, rate,
                                                           threshold):
    d = daemon(config(link, neighbour)).start().wait_ready()
    shared = degraded = 0.0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        shared = max(shared, d.value("xferd_diagnosis", gpu="0", cause="link_shared", default=0))
        degraded = max(degraded, d.value("xferd_bandwidth_degraded", sum_all=True, gpu="0",
                                         default=0))
        time.sleep(0.2)
    contended = d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="contended")
    cycles = d.value("xferd_cycles_total", sum_all=True)
    print(f"{name}: {cycles:.0f} cycles, {contended:.0f} contended probes")
    assert cycles >= 5
    assert contended >= 5, "the neighbour was never seen around a probe"
    assert shared == 1, "no cycle named link_shared"
    assert d.value("xferd_foreign_traffic_bytes_per_second", gpu="0", direction="h2d") > threshold
    assert degraded == 0, "a verdict flipped to DEGRADED beside a small neighbour"
    assert "verdict DEGRADED" not in d.log()
    # The busy check (2 GB/s) let every cycle run: it is the probe's own window that sees it.
    assert d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="skipped_busy",
                   default=0) == 0


def test_a_probe_alone_on_a_fast_link_is_never_contended(tmp_path, daemon):
    rc, doc, err = probe(tmp_path, config('link = "gen4x16"'))
    assert rc == 0, err
    assert doc["devices"][0]["foreign_traffic_threshold_bytes_per_s"] == 2e9
    assert all(r["contention"]["state"] == "clear" for r in doc["results"]
               if r["status"] == "ok"), [r["contention"] for r in doc["results"]]
    d = daemon(config('link = "gen4x16"')).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= 5, 30, "5 cycles")
    assert d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="contended",
                   default=0) == 0
    assert d.value("xferd_diagnosis", gpu="0", cause="link_shared", default=0) == 0
