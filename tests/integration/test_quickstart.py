"""deploy/quickstart.sh with the binary already built (XFERD_BINARY): the flags given to
the script win over its own defaults, and XFERD_LISTEN / XFERD_STATE_DIR set those."""
import os
import signal
import subprocess
import time
import urllib.request

import pytest

from deploy_support import SOURCE_DIR, free_port, require_binary

SCRIPT = SOURCE_DIR / "deploy/quickstart.sh"


@pytest.fixture
def quickstart(tmp_path):
    """Start the script; returns (process, log path). Every one started is stopped."""
    started = []

    def start(*args, **env):
        log = tmp_path / f"quickstart{len(started)}.log"
        full_env = {**os.environ, "XFERD_BINARY": str(require_binary()),
                    "XFERD_STATE_DIR": str(tmp_path / "default-state"), **env}
        with open(log, "w") as out:
            p = subprocess.Popen([str(SCRIPT), *args], cwd=tmp_path, env=full_env,
                                 stdout=out, stderr=subprocess.STDOUT)
        started.append(p)
        return p, log

    yield start
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_metrics(p, log, port, timeout=30):
    """/metrics on the port (the process still running), or fail with the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            pytest.fail(f"quickstart exited {p.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                if r.status == 200:
                    return r.read().decode()
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"no /metrics on port {port} after {timeout} s:\n{log.read_text()}")


def test_listen_address_flag_wins_over_the_default_and_xferd_listen(quickstart):
    port, other = free_port(), free_port()
    p, log = quickstart("--web.listen-address", f"127.0.0.1:{port}",
                        XFERD_LISTEN=f"127.0.0.1:{other}")
    assert "xferd_build_info" in wait_metrics(p, log, port)
    text = log.read_text()
    assert f"metrics at http://127.0.0.1:{port}/metrics" in text, text
    assert "At Most 1" not in text and str(other) not in text, text


def test_equals_spelling_and_state_dir_flag_win(quickstart, tmp_path):
    port = free_port()
    state = tmp_path / "my-state"
    state.mkdir()
    p, log = quickstart(f"--web.listen-address=127.0.0.1:{port}", "--state-dir", str(state))
    wait_metrics(p, log, port)
    text = log.read_text()
    assert f"state: {state}/state.json" in text, text
    assert not (tmp_path / "default-state").exists(), "the script's own state dir was made"


def test_environment_sets_the_defaults(quickstart, tmp_path):
    port = free_port()
    state = tmp_path / "env-state"
    p, log = quickstart(XFERD_LISTEN=f"127.0.0.1:{port}", XFERD_STATE_DIR=str(state))
    wait_metrics(p, log, port)
    assert f"state: {state}/state.json" in log.read_text()
