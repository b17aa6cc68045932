"""TLS and basic auth on the running daemon, proven with the real curl client.

A self-signed certificate is made with openssl at test time; the bcrypt hash is a fixed one
for the password "test-password" (cost 10, made with Python's crypt module).
"""
import shutil
import signal
import subprocess
import time

import pytest

from xferd_harness import BINARY, HASH, PASSWORD, Daemon, make_cert, sim_config, web_config

pytestmark = pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")),
                                reason="curl and openssl are needed")


def curl(url, *args):
    """(HTTP status as curl reports it, curl's exit code, body)."""
    p = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20",
                        *args, url], capture_output=True, text=True)
    body, _, code = p.stdout.rpartition("\n")
    return code, p.returncode, body


@pytest.fixture
def tls_daemon(tmp_path):
    cert, key = make_cert(tmp_path)
    conf = web_config(tmp_path / "web.yml", cert, key, {"prometheus": HASH})
    d = Daemon(tmp_path, sim_config(interval="500ms"), args=["--web.config.file", str(conf)])
    d.start()
    d.cert, d.conf = cert, conf
    yield d
    d.stop()


def test_tls_scrape_with_and_without_credentials(tls_daemon):
    d = tls_daemon
    assert "serving https://127.0.0.1:" in d.log()
    url = f"https://127.0.0.1:{d.port}/metrics"
    cacert = ["--cacert", str(d.cert)]

    code, rc, body = curl(url, *cacert, "-u", f"prometheus:{PASSWORD}")
    assert (code, rc) == ("200", 0), body
    assert "# TYPE process_cpu_seconds_total counter" in body
    assert "xferd_build_info" in body

    code, _, _ = curl(url, *cacert)
    assert code == "401"
    code, _, _ = curl(url, *cacert, "-u", "prometheus:wrong")
    assert code == "401"
    code, _, _ = curl(url, *cacert, "-u", f"intruder:{PASSWORD}")
    assert code == "401"
    # The challenge names the realm so browsers prompt.
    head = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null", *cacert, url],
                          capture_output=True, text=True).stdout
    assert 'WWW-Authenticate: Basic realm="xferd"' in head

    # HEAD over TLS: headers, no body.
    p = subprocess.run(["curl", "-s", "-I", *cacert, "-u", f"prometheus:{PASSWORD}", url],
                       capture_output=True, text=True)
    assert p.stdout.startswith("HTTP/1.1 200")
    assert "text/plain; version=0.0.4" in p.stdout

    # Health and landing page are behind auth too (exporter-toolkit does the same).
    assert curl(f"https://127.0.0.1:{d.port}/healthz", *cacert)[0] == "401"
    code, _, body = curl(f"https://127.0.0.1:{d.port}/healthz", *cacert,
                         "-u", f"prometheus:{PASSWORD}")
    assert code in ("200", "503"), body


def test_tls_port_refuses_plain_http_and_untrusted_clients_and_keeps_serving(tls_daemon):
    d = tls_daemon
    code, rc, _ = curl(f"http://127.0.0.1:{d.port}/metrics")
    assert code == "000" and rc != 0  # no HTTP answer over a TLS port
    code, rc, _ = curl(f"https://127.0.0.1:{d.port}/metrics", "-u", f"prometheus:{PASSWORD}")
    assert rc == 60  # curl: peer certificate cannot be authenticated with known CA
    for _ in range(20):  # a burst of junk handshakes
        curl(f"http://127.0.0.1:{d.port}/")
    assert d.alive()
    code, rc, _ = curl(f"https://127.0.0.1:{d.port}/metrics", "--cacert", str(d.cert),
                       "-u", f"prometheus:{PASSWORD}")
    assert (code, rc) == ("200", 0)


def test_sighup_reloads_the_users(tls_daemon):
    d = tls_daemon
    url = f"https://127.0.0.1:{d.port}/metrics"
    cacert = ["--cacert", str(d.cert)]
    assert curl(url, *cacert, "-u", f"prometheus:{PASSWORD}")[0] == "200"
    web_config(d.conf, d.cert, d.cert.with_suffix(".key"), {"grafana": HASH})
    mark = len(d.log())
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload", start=mark)
    d.wait_for(lambda: curl(url, *cacert, "-u", f"grafana:{PASSWORD}")[0] == "200",
               20, "the new user to be let in")
    assert curl(url, *cacert, "-u", f"prometheus:{PASSWORD}")[0] == "401"


def reload_refused(d, pattern):
    mark = len(d.log())
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload failed, keeping the running configuration: .*" + pattern, start=mark)


def test_an_emptied_or_cut_web_config_on_sighup_keeps_tls_and_auth(tls_daemon):
    """The review: with TLS and basic auth on, an emptied web config (a failed copy) and a
    SIGHUP let /metrics answer 200 to anyone while the reload metric stayed 1. Now a file that
    turns nothing on is refused, as an empty TOML is, and a reload that would drop TLS or
    auth is refused, naming what it would have removed."""
    d = tls_daemon
    url = f"https://127.0.0.1:{d.port}/metrics"
    cacert = ["--cacert", str(d.cert)]
    good = ["-u", f"prometheus:{PASSWORD}"]

    def still_protected():
        assert curl(url, *cacert)[0] == "401"
        code, _, body = curl(url, *cacert, *good)
        assert code == "200"
        assert "xferd_config_last_reload_successful 0" in body, body[-2000:]

    for text in ["", "# cut\n", "basic_auth_users:\n", "tls_server_config:\n"]:
        d.conf.write_text(text)
        reload_refused(d, "turns on neither TLS nor basic auth")
        still_protected()
    # TLS kept, the users cut off: auth would go.
    web_config(d.conf, d.cert, d.cert.with_suffix(".key"))
    reload_refused(d, r"would turn off basic auth \(1 user\)")
    still_protected()
    # Users kept, TLS cut off.
    web_config(d.conf, users={"prometheus": HASH})
    reload_refused(d, r"would turn off TLS \(.*server.crt\)")
    still_protected()
    assert d.alive()


def test_dropping_protection_on_reload_takes_saying_so(tmp_path):
    """Turning auth off by a reload is refused until the config says so on purpose
    ([web] reload_may_remove_protection = true); the web config no longer named counts too."""
    conf = web_config(tmp_path / "web.yml", users={"prometheus": HASH})
    web = f'[web]\nconfig_file = "{conf}"\n'
    d = Daemon(tmp_path, sim_config(interval="500ms", extra=web))
    d.start()
    try:
        url = f"http://127.0.0.1:{d.port}/metrics"
        assert curl(url)[0] == "401"
        d.write_config(sim_config(interval="500ms"))  # config_file gone
        reload_refused(d, r"would turn off basic auth .*no web config file is named now.*"
                          r"reload_may_remove_protection = true")
        assert curl(url)[0] == "401"
        d.write_config(sim_config(interval="500ms",
                                  extra="[web]\nreload_may_remove_protection = true\n"))
        mark = len(d.log())
        d.signal(signal.SIGHUP)
        d.wait_log(r"reload: configuration .* applied", start=mark)
        d.wait_for(lambda: curl(url)[0] == "200", 20, "auth to be off as asked")
    finally:
        assert d.stop() == 0


def raw_get(port, headers):
    """(status line, body) of a raw GET with `headers` (bytes) on a new connection."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + headers + b"Connection: close\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def test_credentials_are_compared_byte_for_byte(tmp_path):
    """The review: "bob:bobpw\\0zzz" got 200 as bob with password bobpw (the credentials went
    through C strings). The NUL and what follows are part of what was sent: 401, cached
    login or not, in the password and in the user name."""
    import base64
    conf = web_config(tmp_path / "web.yml", users={"bob": HASH})
    d = Daemon(tmp_path, sim_config(interval="500ms"), args=["--web.config.file", str(conf)])
    d.start()

    def basic(credentials):
        return b"Authorization: Basic " + base64.b64encode(credentials) + b"\r\n"

    try:
        good = PASSWORD.encode()
        for _ in range(2):  # the second round after the good login is cached
            assert raw_get(d.port, basic(b"bob:" + good + b"\0zzz"))[0].endswith(b"401 Unauthorized")
            assert raw_get(d.port, basic(b"bob\0zzz:" + good))[0].endswith(b"401 Unauthorized")
            assert raw_get(d.port, basic(b"bob:" + good))[0].endswith(b"200 OK")
        assert d.alive()
    finally:
        assert d.stop() == 0


def test_basic_auth_without_tls(tmp_path):
    conf = web_config(tmp_path / "web.yml", users={"prometheus": HASH})
    d = Daemon(tmp_path, sim_config(interval="500ms"), args=["--web.config.file", str(conf)])
    d.start()
    try:
        url = f"http://127.0.0.1:{d.port}/metrics"
        assert curl(url)[0] == "401"
        assert curl(url, "-u", "prometheus:nope")[0] == "401"
        code, _, body = curl(url, "-u", f"prometheus:{PASSWORD}")
        assert code == "200" and "xferd_" in body
    finally:
        d.stop()


@pytest.mark.parametrize("what", ["garbage_cert", "garbage_key", "mismatched_key"])
def test_bad_tls_files_stop_startup_with_a_clear_message(tmp_path, what):
    """Refused when the web config loads, as a configuration error: exit 78, as from
    check-config (a key of another certificate passed check-config and made run exit 71,
    so the unit restarted it every 10 s). The full set: tests/data/bad-web-configs."""
    cert, key = make_cert(tmp_path)
    if what == "garbage_cert":
        cert.write_text("not a certificate\n")
        needle = "holds no PEM certificate"
    elif what == "garbage_key":
        key.write_text("not a key\n")
        needle = "holds no PEM private key"
    else:
        _, key = make_cert(tmp_path, "other")
        needle = "is not the key of certificate"
    conf = web_config(tmp_path / "web.yml", cert, key)
    d = Daemon(tmp_path, sim_config(), args=["--web.config.file", str(conf)])
    d.start(wait_listening=False)
    try:
        rc = d.proc.wait(20)
    finally:
        d.stop()
    log = d.log()
    assert rc == 78, f"exit {rc} (a crash is negative):\n{log}"
    assert needle in log and "fix:" in log, log
    # check-config says the same of a config file naming that web config.
    (tmp_path / "with-web.toml").write_text(f"[web]\nconfig_file = \"{conf}\"\n")
    check = subprocess.run([BINARY, "check-config", str(tmp_path / "with-web.toml")],
                           capture_output=True, text=True)
    assert check.returncode == 78 and needle in check.stderr, check.stderr


def test_port_in_use_is_a_clear_error(tmp_path):
    first = Daemon(tmp_path / "a", sim_config(interval="1s"))
    first.start()
    try:
        second = Daemon(tmp_path / "b", sim_config(interval="1s"),
                        listen=f"127.0.0.1:{first.port}")
        second.start(wait_listening=False)
        rc = second.proc.wait(20)
        second.stop()
        assert rc == 71, second.log()
        assert "already in use" in second.log() and "--web.listen-address" in second.log()
        assert first.get("/healthz")[0] in (200, 503)
    finally:
        first.stop()


def test_only_tls_1_2_and_1_3_are_offered(tls_daemon):
    """exporter-toolkit's default minimum: TLS 1.2. The client is allowed old versions
    (SECLEVEL=0) so that a refusal comes from the server."""
    def handshake(version):
        p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{tls_daemon.port}",
                            f"-{version}", "-cipher", "DEFAULT@SECLEVEL=0",
                            "-CAfile", str(tls_daemon.cert)],
                           input="", capture_output=True, text=True, timeout=20)
        return p.returncode, p.stdout + p.stderr

    rc, out = handshake("tls1_1")
    assert rc != 0 and "Cipher is (NONE)" in out, out
    assert "no protocols available" not in out  # the client did offer TLS 1.1
    for version, name in [("tls1_2", "TLSv1.2"), ("tls1_3", "TLSv1.3")]:
        rc, out = handshake(version)
        assert rc == 0 and f"New, {name}, Cipher is" in out, out
    assert tls_daemon.alive()
