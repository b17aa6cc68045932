"""sd_notify as systemd sees it: a real unix datagram socket as NOTIFY_SOCKET."""
import signal
import time

import pytest

from xferd_harness import Daemon, NotifyListener, sim_config

WATCHDOG_USEC = 1_000_000  # pings expected every 0.5 s


@pytest.fixture
def notified(tmp_path):
    listener = NotifyListener(tmp_path / "notify.sock")
    daemons = []

    def make(config):
        d = Daemon(tmp_path / "d", config,
                   env={"NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
        daemons.append(d)
        return d

    yield listener, make
    for d in daemons:
        d.stop()
    listener.close()


def test_ready_status_watchdog_reloading_stopping(notified):
    listener, make = notified
    d = make(sim_config(interval="300ms")).start()
    t_ready = listener.wait_for("READY=1")
    # READY only once a cycle is done and /metrics answers.
    assert d.value("xferd_cycles_total", sum_all=True) >= 1
    t_status = listener.wait_for("STATUS=cycle 1:")
    assert t_status >= t_ready - 0.2
    status = [m for m in listener.texts() if m.startswith("STATUS=cycle")]
    assert "13/13" in status[0] or "ok" in status[0], status[0]

    # Watchdog cadence: WATCHDOG_USEC / 2 = 0.5 s; over 3 s expect about 6 pings.
    t0 = time.monotonic()
    time.sleep(3.0)
    pings = [t for t in listener.times_of("WATCHDOG=1") if t0 <= t <= t0 + 3.0]
    assert 4 <= len(pings) <= 8, pings
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, gaps  # never as long as systemd's limit

    t_hup = time.monotonic()
    d.signal(signal.SIGHUP)
    t_reloading = listener.wait_for("RELOADING=1", after=t_hup)
    reloading = [m for m in listener.texts() if m.startswith("RELOADING=1")][-1]
    assert "MONOTONIC_USEC=" in reloading
    assert listener.wait_for("READY=1", after=t_reloading) >= t_reloading

    t_term = time.monotonic()
    d.signal(signal.SIGTERM)
    listener.wait_for("STOPPING=1", after=t_term)
    assert d.proc.wait(5) == 0


def test_hung_probe_stops_watchdog_pings_while_metrics_answer(notified):
    listener, make = notified
    d = make(sim_config(interval="2s")).start()  # deadline = 1 s (half the interval)
    listener.wait_for("READY=1")
    time.sleep(1.2)  # a few pings at the 0.5 s cadence before the hang
    t_hang = time.monotonic()
    d.write_config(sim_config(interval="2s", faults=[{"kind": "hang"}]))
    d.signal(signal.SIGHUP)
    d.wait_log(r"probe hung: no answer after", timeout=15)
    t_stalled = time.monotonic()
    time.sleep(3.0)
    late_pings = [t for t in listener.times_of("WATCHDOG=1") if t > t_stalled + 0.2]
    assert late_pings == [], f"{len(late_pings)} pings after the stall"
    early_pings = [t for t in listener.times_of("WATCHDOG=1") if t < t_hang]
    assert len(early_pings) >= 1
    # The exporter still answers, says what happened, and counts the timeout.
    assert d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="timeout") >= 1
    status, body = d.get("/healthz")
    assert status == 503 and "hung" in body
    assert any(m.startswith("STATUS=HUNG") for m in listener.texts())
    assert d.alive()
