"""`xferd run` on the simulated device: scrape, series budget, verdicts, restart, reload, stop."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from xferd_harness import sanitizer_build, sim_config

# tests/helpers/sighup_at_start.cc, built beside the binary (ctest names it).
SIGHUP_AT_START = os.environ.get("XFERD_TEST_SIGHUP_AT_START", "")


def series_of_gpu(text, gpu):
    return [l for l in text.splitlines() if l and not l.startswith("#") and f'gpu="{gpu}"' in l]


def test_scrape_passes_promtool_and_fits_the_series_budget(daemon):
    # The default probe plan (every mode, 64 MiB) on two simulated GPUs.
    config = sim_config(devices=2, sizes=('"64MiB"',), interval="2s")
    d = daemon(config).start().wait_ready()
    text = d.scrape()
    check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                           capture_output=True)
    # Its one lint: xferd_gpu_info carries dcgm-exporter's label names (UUID, modelName,
    # Hostname) on purpose, so that joins with its series need no relabelling.
    problems = set((check.stdout + check.stderr).strip().splitlines())
    assert problems <= {"xferd_gpu_info label names should be written in 'snake_case' not "
                        "'camelCase'"}, problems
    for gpu in ("0", "1"):
        n = len(series_of_gpu(text, gpu))
        assert 50 < n <= 320, f"gpu {gpu}: {n} series"
    assert d.value("xferd_device_info", gpu="0", simulated="1") == 1
    # Every mode and direction has a bandwidth, and process metrics are there.
    bw = [k for k in d.metrics() if k[0] == "xferd_bandwidth_bytes_per_second"]
    assert len(bw) == 2 * 13
    assert d.value("process_resident_memory_bytes") > 0
    status, body = d.get("/healthz")
    assert status == 200, body


def test_degradation_flips_the_verdict_after_k_cycles_and_back(daemon):
    # 4 MiB: smaller transfers are not held to the band (latency dominates them).
    sizes = ('"4MiB"',)
    d = daemon(sim_config(consecutive_bad=3, sizes=sizes)).start().wait_ready()
    assert d.value("xferd_bandwidth_degraded", gpu="0", mode="pinned", direction="h2d") == 0

    d.write_config(sim_config(consecutive_bad=3, sizes=sizes,
                              faults=[{"kind": "degrade", "factor": 0.4}]))
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied")
    cycles_at_reload = d.value("xferd_cycles_total", sum_all=True)
    log_at_reload = len(d.log())
    d.wait_for(lambda: d.value("xferd_bandwidth_degraded", gpu="0", mode="pinned",
                               direction="h2d") == 1, 30, "the verdict to flip to degraded")
    # Not before K = 3 bad readings: cycles, or the confirmation rounds that re-measure a bad
    # reading between cycles (each measures pinned h2d once).
    rounds = (d.value("xferd_cycles_total", sum_all=True) - cycles_at_reload
              + len(re.findall(r" cycle \d+ confirmation: ", d.log()[log_at_reload:])))
    assert rounds >= 3 - 1
    assert d.value("xferd_diagnosis", gpu="0", cause="below_band") == 1
    assert re.search(r"DEGRADED", d.log())

    d.write_config(sim_config(consecutive_bad=3, sizes=sizes))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: d.value("xferd_bandwidth_degraded", gpu="0", mode="pinned",
                               direction="h2d") == 0, 30, "the verdict to recover")


def test_restart_keeps_the_learned_baseline(daemon, tmp_path):
    state = tmp_path / "state"
    d = daemon(sim_config(), state_dir=state).start().wait_ready()
    key = dict(gpu="0", mode="pinned", direction="h2d", size="1MiB")
    d.wait_for(lambda: d.value("xferd_bandwidth_baseline_bytes_per_second", default=0, **key) > 0,
               60, "a baseline to be learned")
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= 8, 60, "more cycles")
    before = d.value("xferd_bandwidth_baseline_bytes_per_second", **key)
    assert d.stop() == 0
    saved = json.loads((state / "state.json").read_text())
    assert saved["version"] == 1

    # An hour's interval: after the first cycle no second one runs, so a baseline seen now
    # can only have come from the state file (learning one takes several cycles).
    d2 = daemon(sim_config(interval="1h", deadline="5s"), state_dir=state).start().wait_ready()
    assert d2.value("xferd_cycles_total", sum_all=True) == 1
    after = d2.value("xferd_bandwidth_baseline_bytes_per_second", **key)
    assert after == pytest.approx(before, rel=0.05)


def test_sighup_with_good_and_bad_config(daemon):
    d = daemon(sim_config()).start().wait_ready()
    assert d.value("xferd_config_last_reload_successful") == 1
    t0 = d.value("xferd_config_last_reload_success_timestamp_seconds")

    time.sleep(1.1)
    d.write_config(sim_config(extra='[daemon]\nlog_level = "debug"\n'))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: d.value("xferd_config_last_reload_success_timestamp_seconds") > t0, 10,
               "the reload timestamp to move")
    assert d.value("xferd_config_last_reload_successful") == 1

    d.write_config("[probe]\ninterval = \"not a duration\"\n")
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: d.value("xferd_config_last_reload_successful") == 0, 10,
               "the reload metric to say 0")
    m = d.wait_log(r"reload failed, keeping the running configuration: (.*)")
    assert "interval" in m.group(1)
    # The old configuration keeps running: cycles go on.
    n = d.value("xferd_cycles_total", sum_all=True)
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) > n + 2, 20, "more cycles")
    assert d.alive()

    d.write_config(sim_config())
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: d.value("xferd_config_last_reload_successful") == 1, 10, "recovery")


def blocked_signals(pid):
    """The signals the process's main thread has blocked (/proc/PID/status SigBlk)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    return 0


@pytest.mark.skipif(sanitizer_build() == "thread",
                    reason="ThreadSanitizer's runtime must be the first library loaded")
def test_sighup_at_the_very_start_is_a_reload_once_started(daemon):
    """The review: SIGHUP within 10 ms of the start killed the daemon (exit 129). A library
    loaded ahead of xferd sends SIGHUP from its initialiser, before main: the earliest a
    signal can find the program's own code running. Then, each start, the test keeps sending
    SIGHUP until the daemon serves (the config being read meanwhile). Each time the daemon
    lives, reloads once it runs, and becomes ready."""
    assert SIGHUP_AT_START and os.path.exists(SIGHUP_AT_START), \
        "XFERD_TEST_SIGHUP_AT_START names the helper library (ctest sets it)"
    env = {"LD_PRELOAD": SIGHUP_AT_START, "XFERD_TEST_SIGHUPS_AT_START": "3",
           # ASan checks that its runtime is the first library; the helper comes before it.
           "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                  "verify_asan_link_order=0"]))}
    for i in range(5):
        d = daemon(sim_config(), env=env)
        d.start(wait_listening=False)
        hups = 0
        while "serving" not in d.log() and d.proc.poll() is None:
            try:
                if blocked_signals(d.proc.pid) & (1 << (signal.SIGHUP - 1)):
                    d.signal(signal.SIGHUP)
                    hups += 1
            except OSError:
                pass  # /proc of a process that just went
            time.sleep(0.002)
        assert d.proc.poll() is None, f"start {i}: exited {d.proc.returncode}:\n{d.log()}"
        d.port = int(d.wait_log(r"serving https?://[^:]+:(\d+)").group(1))
        d.wait_log(r"reload: configuration .* applied")
        d.wait_ready()
        assert d.value("xferd_config_last_reload_successful") == 1
        assert d.alive() and d.get("/healthz")[0] == 200
        # One more, now that it runs, is an ordinary reload.
        t = len(d.log())
        d.signal(signal.SIGHUP)
        d.wait_log(r"reload: configuration .* applied", start=t)
        assert d.stop() == 0, d.log()


def test_sigterm_mid_cycle_exits_within_two_seconds(daemon):
    # Real-time simulation with many iterations: the first cycle takes many seconds.
    d = daemon(sim_config(time_scale=1.0, iterations=400, sizes=('"64MiB"',),
                          interval="1m", deadline="30s",
                          )).start()
    d.wait_for(lambda: d.get("/metrics")[0] == 200, 10, "/metrics to answer")
    time.sleep(0.5)
    assert d.value("xferd_cycles_total", sum_all=True) == 0, "the cycle should still be running"
    t = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.proc.wait(10)
    elapsed = time.monotonic() - t
    assert rc == 0
    assert elapsed < 2.0, f"took {elapsed:.2f} s"
    assert "SIGTERM: stopping" in d.log()


def test_sigterm_with_a_hung_probe_exits_within_two_seconds(daemon):
    d = daemon(sim_config(faults=[{"kind": "hang"}], interval="2s")).start()
    d.wait_for(lambda: d.get("/metrics")[0] == 200, 10, "/metrics to answer")
    time.sleep(0.5)
    t = time.monotonic()
    d.signal(signal.SIGINT)
    rc = d.proc.wait(10)
    assert rc == 0
    assert time.monotonic() - t < 2.0


def test_bad_config_exits_78_and_port_in_use_exits_71(tmp_path):
    from xferd_harness import BINARY
    bad = tmp_path / "bad.toml"
    bad.write_text("[probe]\nintervl = \"1s\"\n")
    r = subprocess.run([BINARY, "run", "--config", str(bad)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 78, r.stderr
    assert "intervl" in r.stderr

    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    good = tmp_path / "good.toml"
    good.write_text(sim_config())
    r = subprocess.run([BINARY, "run", "--config", str(good), "--web.listen-address",
                        f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=30)
    s.close()
    assert r.returncode == 71, r.stderr
    assert str(port) in r.stderr


def test_busy_gpu_is_skipped_and_counted(daemon):
    d = daemon(sim_config(busy="gpu_utilization_percent = 95")).start()
    d.wait_for(lambda: d.value("xferd_probe_runs_total", sum_all=True, gpu="0",
                               result="skipped_busy") >= 13, 20, "busy skips")
    assert d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="ok") == 0
    assert d.value("xferd_cycles_total", result="skipped_busy") >= 1
    assert re.search(r"gpu 0: busy \(utilization 95% >= 50%\)", d.log())
