"""HTTP abuse against the running daemon: nothing crashes it, legitimate scrapes keep working.

One daemon serves the whole module; every test ends by checking it is alive and scrapes.
"""
import base64
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from xferd_harness import Daemon, parse_metrics, sim_config

HASH = "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi"  # "test-password"


def exchange(port, data, timeout=20):
    """Send raw bytes, read until the server closes. Returns (status or 0, headers, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    raw = b""
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused part-way: what it answered is still readable
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            raw += chunk
    finally:
        s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1."):
        return 0, {}, raw
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def request(port, method="GET", path="/metrics", headers=""):
    return exchange(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}"
                          "Connection: close\r\n\r\n".encode("latin-1"))


def scrape_ok(port):
    status, _, body = request(port)
    return status == 200 and b"xferd_build_info" in body


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("abuse"), sim_config(interval="500ms"))
    d.start()
    d.wait_ready()
    yield d
    assert d.alive(), d.log()[-4000:]
    assert d.stop() == 0, d.log()[-4000:]


@pytest.fixture(autouse=True)
def still_serving(request):
    yield
    if "daemon" in request.fixturenames:
        d = request.getfixturevalue("daemon")
        assert d.alive(), d.log()[-4000:]
        assert scrape_ok(d.port)


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /metrics\r\n\r\n",
    b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    b"\r\n\r\n\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(32)),  # a TLS ClientHello
    b"\x00" * 4096,
    bytes(range(256)) * 8,
    b"GET /\x00metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    # Valid enough to be served: HTTP lets servers accept bare LF, and a GET's body
    # (here a broken chunk) is never read, since the answer goes out before it.
    b"GET /metrics HTTP/1.1\nHost: x\n\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]
MAY_BE_SERVED = MALFORMED[-2:]


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_requests_get_no_metrics_and_no_crash(daemon, data):
    status, _, body = exchange(daemon.port, data)
    # A refusal (4xx/5xx, or a closed connection), or harmlessly the landing page.
    if data not in MAY_BE_SERVED:
        assert b"xferd_build_info" not in body, (status, body[:200])
        assert status == 0 or status >= 400 or body.startswith(b"<!DOCTYPE"), status


def test_oversized_headers_are_refused(daemon):
    status, _, _ = request(daemon.port, headers="X-Big: " + "a" * 65536 + "\r\n")
    assert status in (400, 413, 431), status
    many = "".join(f"X-H{i}: {'v' * 60}\r\n" for i in range(2000))
    status, _, _ = request(daemon.port, headers=many)
    assert status in (400, 413, 431), status
    status, _, _ = request(daemon.port, path="/" + "p" * 65536)
    assert status in (400, 414, 431), status


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
                                    "CONNECT", "PROPFIND", "FOO"])
def test_methods_other_than_get_and_head_get_405(daemon, method):
    status, headers, body = exchange(
        daemon.port, f"{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                     "Connection: close\r\n\r\nbody".encode())
    assert status == 405, (status, body[:200])
    assert headers.get("allow") == "GET, HEAD"


def test_head_has_no_body(daemon):
    status, headers, body = request(daemon.port, method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["content-length"]) > 0


@pytest.mark.parametrize("path", [
    "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2f..%2fetc%2fpasswd",
    "/metrics/../../../etc/passwd", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "//etc/passwd",
    "/static/../../../../etc/shadow", "/.%2e/.%2e/etc/passwd", "/%252e%252e/etc/passwd",
    "/proc/self/environ", "/metrics%00.html", "/./metrics/",
])
def test_path_traversal_is_404(daemon, path):
    status, _, body = request(daemon.port, path=path)
    assert status in (400, 404), status
    assert b"root:" not in body and b"PATH=" not in body


def test_slow_clients_do_not_block_scrapes(daemon):
    """50 connections trickle a request at a byte a second; real scrapes still get through."""
    stop = threading.Event()
    socks = [socket.create_connection(("127.0.0.1", daemon.port), timeout=5) for _ in range(50)]

    def trickle():
        payload = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"s" * 1000
        for i in range(len(payload)):
            if stop.is_set():
                return
            for s in socks:
                try:
                    s.send(payload[i:i + 1])
                except OSError:
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(2)
        for _ in range(5):
            start = time.monotonic()
            assert scrape_ok(daemon.port)
            assert time.monotonic() - start < 10
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def test_slowloris_beyond_the_connection_limit_is_cut_off(daemon):
    """More trickling connections than the server's limit (128): the request deadline (30 s)
    frees the slots, so a scrape waits at most about that long, not forever."""
    stop = threading.Event()
    socks = []
    for _ in range(160):
        socks.append(socket.create_connection(("127.0.0.1", daemon.port), timeout=5))

    def trickle():
        while not stop.is_set():
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(2)
        start = time.monotonic()
        status, _, _ = exchange(daemon.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                             b"Connection: close\r\n\r\n", timeout=90)
        waited = time.monotonic() - start
        assert status == 200
        assert waited < 60, waited
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def test_many_concurrent_scrapes_all_succeed(daemon):
    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(lambda _: request(daemon.port)[0], range(100)))
    assert results.count(200) == 100, results


def test_no_descriptor_leak_after_abuse(daemon):
    """Open fds return to where they were once abusive connections are gone."""
    def open_fds():
        return parse_metrics(request(daemon.port)[2].decode())[("process_open_fds", frozenset())]

    before = open_fds()
    with ThreadPoolExecutor(max_workers=len(MALFORMED)) as pool:
        list(pool.map(lambda data: exchange(daemon.port, data), MALFORMED))
    half_open = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(20)]
    for s in half_open:
        s.send(b"GET /met")
        s.close()
    daemon.wait_for(lambda: open_fds() <= before + 2, 30, "descriptors to be released")


def test_wrong_or_missing_credentials_get_401(tmp_path):
    conf = tmp_path / "web.yml"
    conf.write_text(f"basic_auth_users:\n  prometheus: '{HASH}'\n")
    d = Daemon(tmp_path, sim_config(interval="500ms"), args=["--web.config.file", str(conf)])
    d.start()
    try:
        def auth(user, password):
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            return f"Authorization: Basic {token}\r\n"

        for headers in ["", auth("prometheus", "wrong"), auth("admin", "test-password"),
                        auth("prometheus", ""), "Authorization: Basic %%%\r\n",
                        "Authorization: Basic " + "A" * 8000 + "\r\n",
                        "Authorization: Digest username=prometheus\r\n"]:
            for method, path in [("GET", "/metrics"), ("GET", "/"), ("POST", "/metrics"),
                                 ("GET", "/../../etc/passwd")]:
                status, h, body = request(d.port, method, path, headers)
                assert status == 401, (headers[:40], method, path, status)
                assert h.get("www-authenticate") == 'Basic realm="xferd"'
                assert b"xferd_" not in body
        status, _, body = request(d.port, headers=auth("prometheus", "test-password"))
        assert status == 200 and b"xferd_build_info" in body
        assert d.alive()
    finally:
        assert d.stop() == 0
