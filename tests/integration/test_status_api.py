"""The status API (/api/v1/status): every field against /metrics of the same moment (one
source, two views), and the incident log across a restart. docs/http.md ("The status API")
describes the document."""
import json
import math
import re
import signal
import subprocess
import sys
import time

import pytest

from xferd_harness import BINARY, SOURCE_DIR, Daemon, sanitizer_build, sim_config, stable_status

DEGRADE = {"kind": "degrade", "factor": 0.5}
# Held to the band (4 MiB and up): a degrade fault is below band from the first reading.
BAND = ('"4MiB"',)


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def same_moment(d, attempts=100):
    """A status document and a scrape taken with no probe in between: the status before and
    after the scrape are the same (every probe moves a "last_run")."""
    for _ in range(attempts):
        before = status(d)
        metrics = d.metrics()
        after = status(d)
        if stable_status(before) == stable_status(after) and before["daemon"]["cycles"] > 0:
            return before, metrics
        time.sleep(0.05)
    raise AssertionError("no quiet moment between probes to compare the two views")


def series(metrics, name, **labels):
    """{frozenset(labels): value} of `name` whose labels include `labels`."""
    want = {k: str(v) for k, v in labels.items()}
    return {ls: v for (n, ls), v in metrics.items()
            if n == name and want.items() <= dict(ls).items()}


def one(metrics, name, **labels):
    """The value of the one series of `name` with exactly `labels`; None when absent."""
    want = frozenset((k, str(v)) for k, v in labels.items())
    return metrics.get((name, want))


def close(a, b):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_against_metrics(doc, m):
    """Every field of the document that /metrics also shows, compared."""
    assert doc["version"] == 1
    assert doc["daemon"]["cycles"] == sum(series(m, "xferd_cycles_total").values())
    any_degraded = False
    for g in doc["gpus"]:
        gpu = str(g["gpu"])
        info = {k: v for k, v in dict(next(iter(series(m, "xferd_device_info", gpu=gpu)))).items()}
        assert (g["uuid"], g["name"], g["pci_bus_id"]) == (info["uuid"], info["name"],
                                                            info["pci_bus_id"])
        assert g["simulated"] == (info["simulated"] == "1")

        # The verdict and each (mode, direction).
        degraded = series(m, "xferd_bandwidth_degraded", gpu=gpu)
        assert len(degraded) == len(g["pairs"]) > 0
        for p in g["pairs"]:
            v = one(m, "xferd_bandwidth_degraded", gpu=gpu, mode=p["mode"], direction=p["direction"])
            assert v == (1 if p["degraded"] else 0), p
        assert (g["verdict"] == "degraded") == any(v == 1 for v in degraded.values())
        any_degraded = any_degraded or g["verdict"] == "degraded"

        # The band.
        assert close(g["band"]["lower_bytes_per_second"],
                     one(m, "xferd_expected_bandwidth_bytes_per_second", gpu=gpu, bound="lower"))
        assert close(g["band"]["upper_bytes_per_second"],
                     one(m, "xferd_expected_bandwidth_bytes_per_second", gpu=gpu, bound="upper"))

        # Each series: its reading, its baseline, the band it is held to.
        assert g["series"], "no series"
        for s in g["series"]:
            labels = dict(gpu=gpu, mode=s["mode"], direction=s["direction"], size=s["size"])
            bw = one(m, "xferd_bandwidth_bytes_per_second", **labels)
            if s["bandwidth_bytes_per_second"] is None:
                assert bw is None, s
            else:
                assert close(s["bandwidth_bytes_per_second"], bw), (s, bw)
            # Its recent readings end with the reading itself (to the byte), newest last.
            recent = s["recent"]
            assert len(recent["age_seconds"]) == len(recent["bytes_per_second"]) <= 32, s
            if s["bandwidth_bytes_per_second"] is not None and s["age_seconds"] is not None:
                assert recent["bytes_per_second"][-1] == round(s["bandwidth_bytes_per_second"]), s
                assert recent["age_seconds"] == sorted(recent["age_seconds"], reverse=True), s
            base = one(m, "xferd_bandwidth_baseline_bytes_per_second", **labels)
            if s["baseline_bytes_per_second"] is None:
                assert base is None, s
            else:
                assert close(s["baseline_bytes_per_second"], base), (s, base)
            exempt = one(m, "xferd_band_exempt", **labels)
            if s["held_to_band"]:
                assert exempt is None
                own = one(m, "xferd_expected_bandwidth_bytes_per_second", gpu=gpu,
                          mode=s["mode"], direction=s["direction"], bound="lower")
                device = one(m, "xferd_expected_bandwidth_bytes_per_second", gpu=gpu,
                             bound="lower")
                assert close(s["band_lower_bytes_per_second"], own if own is not None else device)
            else:
                assert s["band_lower_bytes_per_second"] is None
            pair = next(p for p in g["pairs"]
                        if (p["mode"], p["direction"]) == (s["mode"], s["direction"]))
            if s["degraded"]:
                assert pair["degraded"], (s, pair)

        # The causes.
        held = {dict(ls)["cause"] for ls, v in series(m, "xferd_diagnosis", gpu=gpu).items()
                if v == 1}
        assert {c["cause"] for c in g["causes"]} == held
        assert all(c["advice"] for c in g["causes"])

        # The link.
        link = g["link"]
        types = [dict(ls)["host_link"] for ls in series(m, "xferd_device_info", gpu=gpu)]
        assert types == [link["host_link"]]
        pcie = link["pcie"]
        for state, got in (("current", pcie["current"]), ("max", pcie["max"]),
                           ("narrowest", pcie["narrowest"])):
            assert got["generation"] == one(m, "xferd_pcie_link_generation", gpu=gpu, state=state)
            assert got["width"] == one(m, "xferd_pcie_link_width", gpu=gpu, state=state)
        # The link's error counters: each value is its counter series' (absent while not
        # readable, never 0), each source's readability the gauge's.
        errors = link["errors"]
        assert errors["read"] is True and errors["counters"], errors
        family = {"aer_dev_": "xferd_pcie_aer_errors_total",
                  "aer_rootport_": "xferd_pcie_aer_rootport_errors_total"}
        sources = {}
        for c in errors["counters"]:
            if c["source"] == "nvml_replay":
                metric = one(m, "xferd_pcie_replays_total", gpu=gpu)
            else:
                name = next(f for prefix, f in family.items() if c["counter"].startswith(prefix))
                metric = one(m, name, gpu=gpu, device=c["device"], **{"class": c["class"]})
            assert (c["value"] is None) == (metric is None), (c, metric)
            if metric is not None:
                assert close(c["value"], metric), (c, metric)
            sources.setdefault((c["device"], c["source"]), []).append(c["readable"])
        for (device, source), readable in sources.items():
            gauge = one(m, "xferd_pcie_error_source_readable", gpu=gpu, device=device,
                        source=source)
            assert gauge == (1 if all(readable) else 0), (device, source, readable, gauge)

        # Contention.
        c = g["contention"]
        readable = one(m, "xferd_gpu_load_readable", gpu=gpu)
        assert c["traffic_readable"] == (readable == 1)
        # And the foreign traffic has its series only where the link was read.
        assert (one(m, "xferd_foreign_traffic_bytes_per_second", gpu=gpu,
                    direction="h2d") is not None) == (readable == 1)
        for direction in ("h2d", "d2h"):
            foreign = one(m, "xferd_foreign_traffic_bytes_per_second", gpu=gpu,
                          direction=direction)
            got = c[f"foreign_{direction}_bytes_per_second"]
            assert (got is None and foreign is None) or close(got, foreign)

        # When each probe last ran: the newest success of any is the GPU's metric.
        newest = 0
        for p in g["probes"]:
            assert p["result"] in ("ok", "error", "timeout", "contended", "unsupported",
                                   "skipped_busy")
            if p["last_success"]:
                newest = max(newest, iso_seconds(p["last_success"]))
        metric = one(m, "xferd_probe_last_success_timestamp_seconds", gpu=gpu)
        assert (metric is None) == (newest == 0), (metric, newest)
        if newest:
            assert abs(metric - newest) < 0.1, (metric, newest)

        # What is current: a stale pair has no verdict series, the count is the metric's.
        assert g["stale_series"] == one(m, "xferd_series_stale", gpu=gpu)
        assert g["stale_series"] == sum(1 for s in g["series"] if s["stale"])
        for p in g["pairs"]:
            verdict = one(m, "xferd_bandwidth_degraded", gpu=gpu, mode=p["mode"],
                          direction=p["direction"])
            assert (verdict is None) == p["stale"], (p, verdict)
            if verdict is not None:
                assert verdict == (1 if p["degraded"] else 0), (p, verdict)
        # The schedule: the allowance and what the last cycle held back are the metrics'.
        sched = g["schedule"]
        assert sched is not None
        assert close(sched["allowance_seconds"], one(m, "xferd_probe_allowance_seconds", gpu=gpu))
        assert sched["held_back"] == one(m, "xferd_series_held_back", gpu=gpu)
        assert sched["held_back"] == sum(1 for s in sched["series"] if s["held_back"])
        assert {s["class"] for s in sched["series"]} <= {"headline", "overdue", "watched",
                                                          "rotating"}
    assert (doc["verdict"] == "degraded") == any_degraded


def iso_seconds(text):
    from datetime import datetime, timezone
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


def test_status_and_metrics_agree_when_healthy(daemon):
    # Every mode, both directions and both ways at once; two GPUs.
    d = daemon(sim_config(interval="1s", devices=2, sizes=('"1MiB"', '"4MiB"'))).start()
    d.wait_ready()
    d.wait_for(lambda: all(s["baseline_bytes_per_second"] for g in status(d)["gpus"]
                           for s in g["series"] if s["mode"] == "pinned"), 60,
               "the pinned baselines")
    doc, m = same_moment(d)
    assert doc["verdict"] == "ok" and doc["summary"].startswith("ok: ")
    assert len(doc["gpus"]) == 2
    assert {s["mode"] for s in doc["gpus"][0]["series"]} >= {"pinned", "pageable"}
    check_against_metrics(doc, m)


def test_status_and_metrics_agree_when_degraded(daemon):
    d = daemon(sim_config(interval="1s", sizes=BAND, faults=[DEGRADE])).start()
    d.wait_for(lambda: status(d)["verdict"] == "degraded", 30, "the DEGRADED verdict")
    doc, m = same_moment(d)
    g = doc["gpus"][0]
    assert g["verdict"] == "degraded"
    assert g["headline"]["below"] == "band"
    assert g["headline"]["reading_bytes_per_second"] < g["headline"]["reference_bytes_per_second"]
    assert "below_band" in {c["cause"] for c in g["causes"]}
    assert doc["summary"].startswith("DEGRADED gpu0")
    check_against_metrics(doc, m)


def test_the_fleet_profile_leaves_the_status_document_and_the_health_check_whole(daemon):
    # [metrics] profile = "fleet": /metrics keeps the headline and the degraded pairs, the
    # status document every series, and `xferd health` reads the same verdict.
    d = daemon(sim_config(interval="1s", sizes=BAND, faults=[DEGRADE],
                          extra='[metrics]\nprofile = "fleet"\n')).start()
    d.wait_for(lambda: status(d)["verdict"] == "degraded", 30, "the DEGRADED verdict")
    doc, m = same_moment(d)
    g = doc["gpus"][0]
    assert len(g["series"]) == 13, [(s["mode"], s["direction"]) for s in g["series"]]
    assert len(g["pairs"]) == 13
    exported = {(dict(ls)["mode"], dict(ls)["direction"]): v
                for ls, v in series(m, "xferd_bandwidth_degraded", gpu=0).items()}
    degraded = {(p["mode"], p["direction"]) for p in g["pairs"] if p["degraded"]}
    assert degraded and {("pinned", "h2d"), ("pinned", "d2h")} <= set(exported)
    assert {k for k, v in exported.items() if v == 1} == degraded
    assert set(exported) == degraded | {("pinned", "h2d"), ("pinned", "d2h")}
    assert not series(m, "xferd_transfer_duration_seconds_bucket")
    assert not [k for k in series(m, "xferd_probe_runs_total") if "mode" in dict(k)]
    r = subprocess.run([BINARY, "health", "--web.listen-address", f"127.0.0.1:{d.port}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and re.match(r"DEGRADED XFERD-\d{3}/[a-z_]+ gpu0 ", r.stdout), (r.stdout,
                                                                                 r.stderr)


def test_status_is_served_with_tls_and_auth_like_the_metrics(daemon, tmp_path):
    import subprocess
    from test_http_tls_auth import HASH, PASSWORD, make_cert, web_config
    cert, key = make_cert(tmp_path)
    conf = web_config(tmp_path / "web.yml", cert, key, {"prometheus": HASH})
    d = Daemon(tmp_path / "d", sim_config(interval="500ms"), args=["--web.config.file", str(conf)])
    d.start()
    try:
        url = f"https://127.0.0.1:{d.port}/api/v1/status"

        def curl(*args):
            return subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--max-time", "20",
                                   "--cacert", str(cert), *args, url],
                                  capture_output=True, text=True).stdout.rpartition("\n")

        body, _, code = curl("-u", f"prometheus:{PASSWORD}")
        assert code == "200", body
        assert json.loads(body)["version"] == 1
        assert curl()[2] == "401"
        assert curl("-u", "prometheus:wrong")[2] == "401"
        # The status page, a view of the document, behind the same TLS and login.
        url = f"https://127.0.0.1:{d.port}/"
        page, _, code = curl("-u", f"prometheus:{PASSWORD}")
        assert code == "200" and "<svg" in page and 'href="/api/v1/status"' in page, page[:500]
        assert curl()[2] == "401"
    finally:
        d.stop()


def test_status_headers_and_landing_page_link(daemon):
    import urllib.request
    d = daemon(sim_config()).start().wait_ready()
    with urllib.request.urlopen(d.url("/api/v1/status"), timeout=10) as r:
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["Cache-Control"] == "no-store"
    assert 'href="/api/v1/status"' in d.get("/")[1]
    assert "/api/v1/status" in d.log()


def wait_verdict(d, verdict, timeout=30):
    d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == verdict, timeout,
               f"gpu0 verdict {verdict}")


def reload(d, **config):
    t = len(d.log())
    d.write_config(sim_config(**config))
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied", start=t)


def test_incident_log_is_kept_across_a_restart(daemon):
    d = daemon(sim_config(interval="300ms", sizes=BAND)).start().wait_ready()
    wait_verdict(d, "ok")
    assert status(d)["incidents"] == []
    reload(d, interval="300ms", sizes=BAND, faults=[DEGRADE])
    wait_verdict(d, "degraded")
    reload(d, interval="300ms", sizes=BAND)
    wait_verdict(d, "ok")
    incidents = status(d)["incidents"]
    assert [(i["from"], i["to"]) for i in incidents] == [("degraded", "ok"), ("ok", "degraded")], \
        "newest first"
    down = incidents[1]
    assert down["gpu"] == 0 and down["uuid"] == status(d)["gpus"][0]["uuid"]
    assert {"mode": "pinned", "direction": "h2d"} in down["series"]
    assert "below_band" in {c["cause"] for c in down["causes"]}
    assert iso_seconds(incidents[0]["time"]) >= iso_seconds(down["time"])
    # Written to the state file each cycle...
    d.wait_for(lambda: len(json.loads((d.state_dir / "state.json").read_text())
                           .get("incidents", [])) == 2, 10, "the incidents in the state file")
    d.stop()

    # ... and read back at the next start: the same entries, before any new cycle.
    d.start()
    d.wait_for(lambda: d.get("/api/v1/status")[0] == 200, 20, "the status API")
    assert status(d)["incidents"] == incidents
    d.wait_ready()
    assert status(d)["incidents"] == incidents, "ok after a restart is no new incident"


def test_a_gpu_degraded_at_a_stop_is_pending_until_judged_again(daemon):
    # consecutive_bad = 3 and a 1 s interval: after the restart, cycles 1 and 2 are pending.
    d = daemon(sim_config(interval="1s", consecutive_bad=3, sizes=BAND, faults=[DEGRADE])).start()
    wait_verdict(d, "degraded", 60)
    d.stop()
    d.write_config(sim_config(interval="1s", consecutive_bad=3, sizes=BAND))  # mended
    d.start()
    d.wait_ready()
    doc = status(d)
    assert doc["gpus"][0]["verdict"] == "pending", doc["gpus"][0]
    assert doc["verdict"] == "pending"
    # The metric says what the tracker says (not degraded); the status says it is unproven.
    assert d.value("xferd_bandwidth_degraded", gpu="0", mode="pinned", direction="h2d") == 0
    wait_verdict(d, "ok", 30)
    incidents = status(d)["incidents"]
    assert (incidents[0]["from"], incidents[0]["to"]) == ("degraded", "ok")
    assert len(incidents) == 2


def test_many_clients_of_a_64_gpu_status_document_stay_within_the_memory_budget():
    """The review: with 64 GPUs the status document is 602 KB, and 50 clients reading it
    took the daemon from 27 to 44 MB, where it stayed. The document (and the registry's text)
    is now rendered once per change and shared by every answer without a copy, one render at
    a time, and what a render let go is handed back: bench/status_rss.py exits 1 when RSS
    went over 32 MiB or stayed 4 MiB above where it started. With every series' ring of
    recent readings full (--full: the document at its largest, 1.3 MB), half the clients
    read the document and half the status page made of it."""
    if sanitizer_build():
        pytest.skip(f"{sanitizer_build()} sanitizer build: its shadow memory is not the daemon's")
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "bench" / "status_rss.py"),
                        "--xferd", BINARY, "--devices", "64", "--clients", "50", "--slow", "10",
                        "--seconds", "6", "--path", "/api/v1/status,/", "--full"],
                       capture_output=True, text=True, timeout=300)
    print("\n" + r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failed" in r.stdout
