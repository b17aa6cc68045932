"""`xferd health` against real daemons on the simulated device: the exit status of
node-problem-detector's plugin protocol (0 ok, 1 problem, 2 unknown) and the line, for a
healthy GPU, each way a GPU turns DEGRADED, an unreachable, hung or stale daemon, answers
that are not xferd's, and TLS with basic auth; Nagios's form (0, 2, 3) too."""
import http.server
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

import pytest

from abuse_support import IdleSockets
from xferd_harness import BINARY, HASH, PASSWORD, Daemon, make_cert, sim_config, web_config

# bcrypt (cost 10) of "test-password", made with Python's crypt module.


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
# Each cause's fault code and action, as the line carries them (docs/health.md, "Fault codes").
TOKEN = {"below_band": "XFERD-301/diagnose", "link_downtrained": "XFERD-101/reboot"}

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
    assert line.startswith(f"DEGRADED {TOKEN[cause]} gpu0 "), line
    assert f": {cause}," in line[:80], f"code, GPU, series and cause within 80 bytes: {line}"
    rc, nagios, _ = ask(d, "--nagios")
    assert rc == 2 and nagios.startswith(f"XFERD CRITICAL - DEGRADED {TOKEN[cause]} gpu0 "), nagios
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
    assert line.startswith("DEGRADED XFERD-101/reboot gpu0 "), line
    assert ": link_downtrained," in line, line
    assert "baseline" in line, line
    assert ask(d, "--cause", "link_downtrained")[0] == 1
    reload(d, interval="300ms")
    wait_status(d, 0)


def test_unreachable(tmp_path):
    port = free_port()
    rc, line, took = health("--web.listen-address", f"127.0.0.1:{port}")
    assert rc == 2
    assert line.startswith(f"UNKNOWN XFERD-911/none: xferd unreachable: http://127.0.0.1:{port}"), line
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
    assert line in ("UNKNOWN XFERD-900/none: no verdict yet: the first probe cycle is running",
                    "UNKNOWN XFERD-910/none: xferd unhealthy: a probe is hung in a device call past its "
                    "deadline (see the log)"), line


def test_hung_probe_is_unknown(daemon):
    d = started(daemon, interval="2s")
    reload(d, interval="2s", faults=[{"kind": "hang"}])
    rc, line, _ = wait_status(d, 2, timeout=30)
    assert line.startswith("UNKNOWN XFERD-910/none: xferd unhealthy: a probe is hung"), line


def test_stale_verdict(daemon):
    d = started(daemon, interval="3s")
    time.sleep(0.5)
    rc, line, _ = ask(d, "--stale-after", "100ms")
    assert rc == 2
    assert line.startswith("UNKNOWN XFERD-910/none: verdict stale: the last probe cycle ended"), line
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


def good_document():
    """A status document of the documented shape (docs/http.md): one GPU, ok."""
    return {"version": 1, "verdict": "ok", "summary": "ok: 1/1 within band",
            "daemon": {"healthy": True, "reason": "ok", "cycles": 3,
                       "last_cycle_age_seconds": 5, "stale_after_seconds": 195,
                       "interval_seconds": 60, "consecutive_bad": 3},
            "gpus": [{"gpu": 0, "verdict": "ok", "headline": None, "causes": []}],
            "incidents": []}


def spoiled(**changes):
    """The good document with `changes` applied: "daemon.healthy": value, or None to drop."""
    def make():
        doc = good_document()
        for path, value in changes.items():
            *parents, last = path.split(".")
            node = doc
            for key in parents:
                node = node[int(key)] if key.isdigit() else node[key]
            if value is DROP:
                del node[last]
            else:
                node[int(last) if last.isdigit() else last] = value
        return json.dumps(doc).encode()
    return make


DROP = object()

# The review: each of the first four gave exit 0 "OK". Every answer that is not exactly the
# documented shape is unknown, and the line says what was wrong.
HOSTILE_DOCUMENTS = {
    "healthy is the string false": (spoiled(**{"daemon.healthy": "false"}),
                                    'daemon.healthy is the string "false"'),
    "age 1e9, stale after 0": (spoiled(**{"daemon.last_cycle_age_seconds": 1e9,
                                          "daemon.stale_after_seconds": 0}),
                               "daemon.stale_after_seconds is the number 0"),
    "age 1e9, no stale after": (spoiled(**{"daemon.last_cycle_age_seconds": 1e9,
                                           "daemon.stale_after_seconds": DROP}),
                                "daemon.stale_after_seconds is missing"),
    "negative age": (spoiled(**{"daemon.last_cycle_age_seconds": -30}),
                     "daemon.last_cycle_age_seconds is the number -30"),
    "healthy missing": (spoiled(**{"daemon.healthy": DROP}), "daemon.healthy is missing"),
    "healthy null": (spoiled(**{"daemon.healthy": None}), "daemon.healthy is null"),
    "stale after infinite": (lambda: spoiled()().replace(b'"stale_after_seconds": 195',
                                                          b'"stale_after_seconds": 1e999'),
                             "not a status document (not valid JSON)"),
    "node ok over a degraded GPU": (spoiled(**{"gpus.0.verdict": "degraded"}),
                                    'verdict is the string "ok"'),
    "GPU verdict OK in capitals": (spoiled(**{"gpus.0.verdict": "OK", "verdict": "OK"}),
                                   "gpus[0].verdict"),
    "GPU index a string": (spoiled(**{"gpus.0.gpu": "0"}), "gpus[0].gpu"),
    "causes missing": (spoiled(**{"gpus.0.causes": DROP}), "gpus[0].causes is missing"),
    "no GPU": (spoiled(**{"gpus": []}), "gpus is empty"),
    "version 1.5": (spoiled(**{"version": 1.5}), "version is the number 1.5"),
    "daemon given twice": (lambda: b'{"daemon": {"healthy": false, "reason": "x"}, '
                           + spoiled()()[1:], '"daemon" twice'),
}


def test_the_good_document_is_ok(fake_daemon):
    """The control for HOSTILE_DOCUMENTS: the document they spoil is judged ok."""
    fake_daemon.answer = (200, spoiled()(), 0)
    port = fake_daemon.server_address[1]
    assert health("--url", f"http://127.0.0.1:{port}")[:2] == (0, "OK: 1 GPU within band")


@pytest.mark.parametrize("case", list(HOSTILE_DOCUMENTS))
def test_documents_not_of_the_documented_shape_are_unknown(fake_daemon, case):
    body, words = HOSTILE_DOCUMENTS[case]
    fake_daemon.answer = (200, body(), 0)
    port = fake_daemon.server_address[1]
    rc, line, _ = health("--url", f"http://127.0.0.1:{port}")
    assert rc == 2, line
    assert line.startswith("UNKNOWN XFERD-911/none: ") and words in line, line
    rc, line, _ = health("--url", f"http://127.0.0.1:{port}", "--nagios")
    assert rc == 3 and line.startswith("XFERD UNKNOWN - "), line


def test_credentials_in_the_url_never_show(tmp_path):
    """The review: `--url http://alice:goodpw@...` echoed the password in the UNKNOWN line,
    which ends in node-problem-detector's events and Nagios's log."""
    for url in ["http://alice:goodpw@127.0.0.1:9742", "https://alice:goodpw@[::1]:9742/x",
                "http://alice:goodpw@127.0.0.1:9742/metrics", "alice:goodpw@127.0.0.1:9742",
                "ftp://alice:goodpw@127.0.0.1", "http://alice:go@od/pw@127.0.0.1:1",
                "http://alice:goodpw@127.0.0.1:99999"]:
        for extra in ([], ["--nagios"]):
            r = subprocess.run([BINARY, "health", "--url", url, *extra], capture_output=True,
                               text=True, timeout=30)
            assert r.returncode in (2, 3), (url, r.stdout)
            for out in (r.stdout, r.stderr):
                assert "goodpw" not in out and "od/pw" not in out, (url, out)
            assert "credentials" in r.stdout or "***" in r.stdout, (url, r.stdout)


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
        assert line.startswith("UNKNOWN XFERD-911/none: ") and words in line, (args, line)


@pytest.fixture
def secured(daemon, tmp_path):
    """A daemon serving TLS (a certificate for 127.0.0.1 / localhost) and basic auth, its web
    config named in its config file as an installed one is."""
    web = web_config(tmp_path / "web.yml", *make_cert(tmp_path), {"prometheus": HASH})
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
    wrong.chmod(0o600)
    rc, line, _ = ask(d, "--basic-auth.password-file", str(wrong))
    assert rc == 2 and "refused the login (401)" in line, line
    rc, line, _ = ask(d, *pw, "--basic-auth.username", "intruder")
    assert rc == 2 and "401" in line, line
    empty = tmp_path / "empty"
    empty.write_text("")
    empty.chmod(0o600)
    rc, line, _ = ask(d, "--basic-auth.password-file", str(empty))
    assert rc == 2 and "is empty" in line, line

    # Certificate checks: another CA, another name, plain HTTP to the TLS port.
    other, _ = make_cert(tmp_path, "other", cn="other", alt_names=None)
    rc, line, _ = ask(d, *pw, "--tls.ca-file", str(other))
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


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o604, 0o660, 0o620])
def test_a_password_file_others_can_read_is_refused(secured, mode):
    """The review: a world-readable password file (0644, 0666) was used without a word. As
    ssh refuses such a private key, xferd health refuses it, and says to chmod 0600 (or 0640
    with a group of its own)."""
    d = secured
    d.password.chmod(mode)
    try:
        rc, line, _ = ask(d, "--basic-auth.password-file", str(d.password))
    finally:
        d.password.chmod(0o600)
    assert rc == 2, line
    assert f"mode 0{mode:o}" in line and "chmod 0600" in line, line
    assert "0644" not in line.replace(f"mode 0{mode:o}", ""), line
    assert PASSWORD not in line


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640, 0o440])
def test_a_password_file_for_its_owner_or_group_is_read(secured, mode):
    d = secured
    d.password.chmod(mode)
    try:
        assert ask(d, "--basic-auth.password-file", str(d.password))[0] == 0
    finally:
        d.password.chmod(0o600)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to read as another user")
def test_a_password_file_it_cannot_read_is_not_advised_open_to_all(tmp_path):
    """The review: "Permission denied" advised chmod 0644, which makes a password every
    user's. The fix names 0600 or 0640 with a group of its own."""
    where = pathlib.Path(tempfile.mkdtemp())
    try:
        where.chmod(0o755)
        password = where / "password"
        password.write_text("secret\n")
        password.chmod(0o600)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            BINARY, "health", "--url", "http://127.0.0.1:1",
                            "--basic-auth.username", "prometheus",
                            "--basic-auth.password-file", str(password)],
                           capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(where)
    assert r.returncode == 2, r.stdout
    assert "Permission denied" in r.stdout and "chmod 0600" in r.stdout, r.stdout
    assert "0644" not in r.stdout, r.stdout


@pytest.fixture
def crowded(daemon, tmp_path):
    """A daemon over TLS with basic auth whose config names its state directory (so `xferd
    health --config` finds its health socket as an installed one does), and 140 idle
    sockets from 127.0.0.1 held open against its port, reopened as it closes them: more than
    the 128 connections one address may hold over TLS."""
    web = web_config(tmp_path / "web.yml", *make_cert(tmp_path), {"prometheus": HASH})
    state = tmp_path / "state"
    listen = f"127.0.0.1:{free_port()}"
    d = daemon(sim_config() + f'\n[web]\nlisten_address = "{listen}"\nconfig_file = "{web}"\n'
               f'\n[daemon]\nstate_dir = "{state}"\n', listen=listen, state_dir=state)
    d.start()
    d.socket = state / "health.sock"
    d.wait_for(lambda: ask(d)[0] == 0, 30, "the first verdict over the health socket")
    d.holder = IdleSockets(d.port, count=140, source="127.0.0.1").start()
    assert d.holder.wait_held(), f"only {d.holder.opened} idle connections opened"
    yield d
    d.holder.stop()


def refusals(d):
    """xferd_http_refusals_total{reason="address_limit"}, scraped from 127.0.0.2 over TLS."""
    import ssl
    ctx = ssl.create_default_context(cafile=str(d.dir.parent / "server.crt"))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", d.port), 10,
                                                 source_address=("127.0.0.2", 0)),
                        server_hostname="localhost")
    auth = __import__("base64").b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
              "Connection: close\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    m = re.search(rb'xferd_http_refusals_total\{reason="address_limit"\} (\d+)', data)
    assert m, data[:300]
    return int(m.group(1))


def test_the_health_socket_answers_while_one_address_crowds_out_the_port(crowded):
    """The review: 130 idle TCP sockets from 127.0.0.1 (no TLS, no credentials) filled the
    address's 128 TLS connections, and `xferd health` gave UNKNOWN in 5 of 5 runs, saying
    "TLS handshake failed ... check that the daemon serves TLS there"; no log line and no
    metric showed the refusals. On the daemon's host xferd health asks over the health
    socket, which the flood cannot reach, needs no login, and answers; asked over the port,
    it says what happened; the refusals are counted and said once a period."""
    d = crowded
    st = os.stat(d.socket)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
    for _ in range(5):
        rc, line, took = ask(d)
        assert (rc, line) == (0, "OK: 1 GPU within band"), line
        assert took < 5
    # Over the crowded port the line says what happened, not "check that it serves TLS".
    said = []
    for _ in range(5):
        rc, line, _ = ask(d, "--socket", "", "--basic-auth.password-file", str(write_password(d)))
        assert rc in (0, 2), line
        said.append(line)
    refused = [l for l in said if l.startswith("UNKNOWN")]
    assert refused, said
    for line in refused:
        assert "too many connections from this address" in line, line
        assert line.index("too many connections") < line.find("serve TLS") or \
            "serve TLS" not in line, line  # the likely cause first
    counted = refusals(d)
    print(f"\nrefused for the per-address limit: {counted}")
    assert counted > 100, "the refusals are counted"
    lines = [l for l in d.log().splitlines() if "http: refused" in l]
    assert len(lines) == 1, lines  # the first at once; the rest summed up after 60 s
    assert "127.0.0.1" in lines[0] and "128 connections" in lines[0], lines[0]


def write_password(d):
    p = d.dir / "password"
    p.write_text(PASSWORD + "\n")
    p.chmod(0o600)
    return p


def test_the_health_socket_goes_with_the_daemon_and_a_stale_one_is_replaced(daemon, tmp_path):
    state = tmp_path / "state"
    d = daemon(sim_config() + f'\n[daemon]\nstate_dir = "{state}"\n', state_dir=state)
    d.start().wait_ready()
    sock = state / "health.sock"
    assert ask(d)[:2] == (0, "OK: 1 GPU within band")
    d.kill9()
    assert sock.exists(), "a killed daemon leaves its socket file"
    # Nothing answers there: xferd health falls back to the port (none now) and says both.
    rc, line, _ = ask(d, "--web.listen-address", f"127.0.0.1:{free_port()}", "--socket", str(sock))
    assert rc == 2 and "unix:" in line and "Connection refused" in line, line
    d.start().wait_ready()  # the stale file is replaced
    assert ask(d)[:2] == (0, "OK: 1 GPU within band")
    assert d.stop() == 0
    assert not sock.exists(), "a stopped daemon removes its socket"
    # "" turns it off.
    d.write_config(sim_config() + f'\n[daemon]\nstate_dir = "{state}"\n[web]\nhealth_socket = ""\n')
    d.start().wait_ready()
    assert not sock.exists()
