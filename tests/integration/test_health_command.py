"""`xferd health` against real daemons on the simulated device: the exit status of
node-problem-detector's plugin protocol (0 ok, 1 problem, 2 unknown) and the line, for a
healthy GPU, each way a GPU turns DEGRADED, an unreachable, hung or stale daemon, answers
that are not xferd's, and TLS with basic auth; Nagios's form (0, 2, 3) too."""
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from xferd_harness import BINARY, Daemon, sim_config

# bcrypt (cost 10) of "test-password", made with Python's crypt module.
PASSWORD = "test-password"
HASH = "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi"


def health(*args, timeout=30):
    """(exit status, the line, seconds it took)."""
    start = time.monotonic()
    r = subprocess.run([BINARY, "health", *args], capture_output=True, text=True,
                       timeout=timeout)
    lines = r.stdout.splitlines()
    assert len(lines) == 1, f"one line expected on stdout, got {r.stdout!r} (stderr {r.stderr!r})"
    return r.returncode, lines[0], time.monotonic() - start


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started(daemon, extra="", **config):
    """A daemon whose config file names its address, as an installed one does."""
    port = free_port()
    listen = f"127.0.0.1:{port}"
    text = sim_config(**config) + f'\n[web]\nlisten_address = "{listen}"\n{extra}'
    d = daemon(text, listen=listen)
    d.extra = extra
    d.start().wait_ready()
    return d


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def ask(d, *args):
    """`xferd health` reading the daemon's own config file."""
    return health("--config", str(d.config_path), *args)


def reload(d, **config):
    t = len(d.log())
    d.write_config(sim_config(**config) + f'\n[web]\nlisten_address = "{d.listen}"\n{d.extra}')
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied", start=t)


def wait_status(d, want, *args, timeout=60):
    last = None

    def check():
        nonlocal last
        last = ask(d, *args)
        return last[0] == want
    d.wait_for(check, timeout, f"xferd health to exit {want} (last: {last})")
    return last


def test_ok(daemon):
    d = started(daemon)
    rc, line, took = ask(d)
    assert (rc, line) == (0, "OK: 1 GPU within band")
    assert took < 5
    rc, line, _ = ask(d, "--nagios")
    assert (rc, line) == (0, "XFERD OK - OK: 1 GPU within band")


# What makes a GPU DEGRADED from the start, each with the words its line must carry. A link
# trained down from the start is held to what the path can carry, which it does not reach.
DEGRADED_FROM_THE_START = [
    ("degrade", [{"kind": "degrade", "factor": 0.5}], "below_band"),
    ("slow", [{"kind": "slow", "factor": 2.5}], "below_band"),
    ("downtrained_from_start", [{"kind": "downtrain", "gen": 4, "width": 4}], "link_downtrained"),
]


@pytest.mark.parametrize("name,faults,cause", DEGRADED_FROM_THE_START,
                         ids=[c[0] for c in DEGRADED_FROM_THE_START])
def test_degraded(daemon, name, faults, cause):
    # 4 MiB: held to the band from the first reading (smaller sizes only to their baseline).
    d = started(daemon, faults=faults, sizes=('"4MiB"',))
    rc, line, _ = wait_status(d, 1)
    assert line.startswith("DEGRADED gpu0 "), line
    assert f": {cause}," in line[:80], f"GPU, series and cause within 80 bytes: {line}"
    rc, nagios, _ = ask(d, "--nagios")
    assert rc == 2 and nagios.startswith("XFERD CRITICAL - DEGRADED gpu0 "), nagios
    # Only the cause asked about counts.
    assert ask(d, "--cause", cause)[0] == 1
    rc, line, _ = ask(d, "--cause", "numa_remote")
    assert (rc, line) == (0, "OK: no GPU degraded with numa_remote (1 degraded with other causes)")


def test_link_trained_down_while_running(daemon):
    # Baselines learned on Gen4 x16, then the link trains down to x4: the readings fall below
    # the baseline and the link says why; mended, the node is ok again.
    d = started(daemon, interval="300ms")
    # Drift counts once a baseline rests on 5 cycles (kMinBaselineCycles).
    d.wait_for(lambda: all(s["baseline_cycles"] >= 5 for s in status(d)["gpus"][0]["series"]),
               60, "baselines learned over 5 cycles")
    reload(d, interval="300ms", faults=[{"kind": "downtrain", "gen": 4, "width": 4}])
    rc, line, _ = wait_status(d, 1)
    assert line.startswith("DEGRADED gpu0 "), line
    assert ": link_downtrained," in line, line
    assert "baseline" in line, line
    assert ask(d, "--cause", "link_downtrained")[0] == 1
    reload(d, interval="300ms")
    wait_status(d, 0)


def test_unreachable(tmp_path):
    port = free_port()
    rc, line, took = health("--web.listen-address", f"127.0.0.1:{port}")
    assert rc == 2
    assert line.startswith(f"UNKNOWN: xferd unreachable: http://127.0.0.1:{port}"), line
    assert "cannot connect" in line
    assert took < 5
    assert health("--web.listen-address", f"127.0.0.1:{port}", "--nagios")[0] == 3


def test_a_stopped_daemon_never_hangs_the_check(daemon):
    d = started(daemon)
    d.signal(signal.SIGSTOP)
    try:
        rc, line, took = ask(d, "--timeout", "1s")
    finally:
        d.signal(signal.SIGCONT)
    assert rc == 2, line
    assert "no answer within 1.0 s" in line, line
    assert took < 4


def test_no_verdict_yet(daemon):
    # A probe that hangs from the very first cycle: no cycle ever finishes.
    d = daemon(sim_config(faults=[{"kind": "hang"}]))
    d.start()
    rc, line, _ = health("--web.listen-address", f"127.0.0.1:{d.port}")
    assert rc == 2
    assert line in ("UNKNOWN: no verdict yet: the first probe cycle is running",
                    "UNKNOWN: xferd unhealthy: a probe is hung in a device call past its "
                    "deadline (see the log)"), line


def test_hung_probe_is_unknown(daemon):
    d = started(daemon, interval="2s")
    reload(d, interval="2s", faults=[{"kind": "hang"}])
    rc, line, _ = wait_status(d, 2, timeout=30)
    assert line.startswith("UNKNOWN: xferd unhealthy: a probe is hung"), line


def test_stale_verdict(daemon):
    d = started(daemon, interval="3s")
    time.sleep(0.5)
    rc, line, _ = ask(d, "--stale-after", "100ms")
    assert rc == 2
    assert line.startswith("UNKNOWN: verdict stale: the last probe cycle ended"), line
    assert "stale after 100 ms" in line
    assert ask(d, "--stale-after", "1m")[0] == 0


class Answer(http.server.BaseHTTPRequestHandler):
    """Answers /api/v1/status with whatever the test put in `server.answer`."""

    def do_GET(self):
        status, body, delay = self.server.answer
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_daemon():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


NOT_XFERD = {
    "html": (200, lambda: b"<html>not json</html>", 0, "not a status document"),
    "future version": (200, lambda: b'{"version": 9}', 0, "version 9"),
    "deep nesting": (200, lambda: b"[" * 100000, 0, "not a status document"),
    "9 MiB": (200, lambda: b"x" * (9 << 20), 0, "a body over"),
    "404": (404, lambda: b"Not Found", 0, "no status API (404)"),
    "500 with escapes": (500, lambda: b"\x1b[2J oops", 0, "answered 500"),
    "too slow": (200, lambda: b"{}", 3, "no answer within 1.0 s"),
}


@pytest.mark.parametrize("case", list(NOT_XFERD))
def test_answers_that_are_not_xferds_are_unknown(fake_daemon, case):
    status, body, delay, words = NOT_XFERD[case]
    fake_daemon.answer = (status, body(), delay)
    port = fake_daemon.server_address[1]
    rc, line, took = health("--url", f"http://127.0.0.1:{port}", "--timeout", "1s")
    assert rc == 2, line
    assert words in line, line
    assert "\x1b" not in line
    assert took < 5


def test_bad_settings_are_unknown_with_the_fix(tmp_path):
    cases = [
        (["--timeout", "soon"], "--timeout"),
        (["--cause", "gremlins"], "not a cause xferd names"),
        (["--url", "ftp://x"], "http:// or https://"),
        (["--url", "http://127.0.0.1:1/metrics"], "the daemon's address only"),
        (["--config", str(tmp_path / "missing.toml")], "missing.toml"),
        (["--web.listen-address", "127.0.0.1:0"], "port 0"),
    ]
    for args, words in cases:
        rc, line, _ = health(*args)
        assert rc == 2, (args, line)
        assert line.startswith("UNKNOWN: ") and words in line, (args, line)


@pytest.fixture
def secured(daemon, tmp_path):
    """A daemon serving TLS (a certificate for 127.0.0.1 / localhost) and basic auth, its web
    config named in its config file as an installed one is."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(tmp_path / "server.key"), "-out", str(tmp_path / "server.crt")],
                   check=True, capture_output=True)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {tmp_path / 'server.crt'}\n"
                   f"  key_file: {tmp_path / 'server.key'}\n"
                   f"basic_auth_users:\n  prometheus: '{HASH}'\n")
    port = free_port()
    listen = f"127.0.0.1:{port}"
    d = daemon(sim_config() + f'\n[web]\nlisten_address = "{listen}"\nconfig_file = "{web}"\n',
               listen=listen)
    d.start()
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    d.password = password
    d.wait_for(lambda: ask(d, "--basic-auth.password-file", str(password))[0] == 0, 30,
               "the first verdict over TLS")
    return d


def test_tls_and_basic_auth(secured, tmp_path):
    d = secured
    pw = ["--basic-auth.password-file", str(d.password)]
    # The config says https and the user; the daemon's own certificate is the trust anchor.
    rc, line, _ = ask(d, *pw)
    assert (rc, line) == (0, "OK: 1 GPU within band")
    assert ask(d, *pw, "--basic-auth.username", "prometheus")[0] == 0
    # By name, the certificate's other name.
    assert ask(d, *pw, "--url", f"https://localhost:{d.port}")[0] == 0

    rc, line, _ = ask(d)
    assert rc == 2 and "--basic-auth.password-file" in line and "never on the command line" in line
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    rc, line, _ = ask(d, "--basic-auth.password-file", str(wrong))
    assert rc == 2 and "refused the login (401)" in line, line
    rc, line, _ = ask(d, *pw, "--basic-auth.username", "intruder")
    assert rc == 2 and "401" in line, line
    empty = tmp_path / "empty"
    empty.write_text("")
    rc, line, _ = ask(d, "--basic-auth.password-file", str(empty))
    assert rc == 2 and "is empty" in line, line

    # Certificate checks: another CA, another name, plain HTTP to the TLS port.
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=other",
                    "-keyout", str(other / "k"), "-out", str(other / "c")],
                   check=True, capture_output=True)
    rc, line, _ = ask(d, *pw, "--tls.ca-file", str(other / "c"))
    assert rc == 2 and "fails the check" in line, line
    rc, line, _ = ask(d, *pw, "--tls.server-name", "gpu-node-7.example")
    assert rc == 2 and "gpu-node-7.example" in line, line
    rc, line, took = ask(d, *pw, "--url", f"http://127.0.0.1:{d.port}", "--timeout", "2s")
    assert rc == 2 and took < 6, line

    # The client never reads the daemon's key: a user who cannot read it still asks.
    key = tmp_path / "server.key"
    key.rename(tmp_path / "elsewhere.key")
    try:
        assert ask(d, *pw)[0] == 0
    finally:
        (tmp_path / "elsewhere.key").rename(key)


def test_the_password_never_shows(secured):
    d = secured
    rc, line, _ = ask(d, "--basic-auth.password-file", str(d.password))
    assert rc == 0 and PASSWORD not in line
    # A failed login does not echo it either.
    d.password.write_text("wrong-" + PASSWORD + "\n")
    rc, line, _ = ask(d, "--basic-auth.password-file", str(d.password))
    assert rc == 2 and PASSWORD not in line, line
