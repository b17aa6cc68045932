"""HTTP abuse against the running daemon, over plain HTTP and over TLS: nothing crashes it,
legitimate scrapes keep working, idle sockets never starve a scrape.

One daemon per scheme serves the module; every test ends by checking it is alive and scrapes.
The TLS daemon uses the test certificate of tests/data/tls.
"""
import base64
import gzip
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from abuse_support import IdleSockets, percentile, timed_scrape
from xferd_harness import (HASH, SOURCE_DIR, Daemon, parse_metrics, sanitizer_build, sim_config,
                           web_config)

TLS_DIR = SOURCE_DIR / "tests" / "data" / "tls"
CA = str(TLS_DIR / "server.crt")


def connect(d, timeout=20, source="127.0.0.1"):
    """A connection to the daemon `d`, TLS when it serves TLS (d.tls_ca)."""
    s = socket.create_connection(("127.0.0.1", d.port), timeout=timeout,
                                 source_address=(source, 0))
    if d.tls_ca:
        s = ssl.create_default_context(cafile=d.tls_ca).wrap_socket(s,
                                                                    server_hostname="localhost")
    return s


def exchange(d, data, timeout=20):
    """Send raw bytes, read until the server closes. Returns (status or 0, headers, body)."""
    raw = b""
    try:
        s = connect(d, timeout)
    except (OSError, ssl.SSLError):
        return 0, {}, b""
    try:
        try:
            s.sendall(data)
        except (OSError, ssl.SSLError):
            pass  # refused part-way: what it answered is still readable
        while True:
            try:
                chunk = s.recv(65536)
            except (OSError, ssl.SSLError):
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


def request(d, method="GET", path="/metrics", headers=""):
    return exchange(d, f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}"
                       "Connection: close\r\n\r\n".encode("latin-1"))


def scrape_ok(d):
    status, _, body = request(d)
    return status == 200 and b"xferd_build_info" in body


def start(tmp, tls, users=None, config=None):
    args = []
    if tls or users:
        cert, key = (TLS_DIR / "server.crt", TLS_DIR / "server.key") if tls else (None, None)
        web = web_config(tmp / "web.yml", cert, key, users)
        args = ["--web.config.file", str(web)]
    d = Daemon(tmp, config or sim_config(interval="500ms"), args=args)
    d.tls_ca = CA if tls else None
    d.start()
    d.wait_log(r"ready: first probe cycle done", timeout=30)
    return d


@pytest.fixture(scope="module", params=["http", "https"])
def daemon(request, tmp_path_factory):
    d = start(tmp_path_factory.mktemp(f"abuse-{request.param}"), request.param == "https")
    yield d
    assert d.alive(), d.log()[-4000:]
    assert d.stop() == 0, d.log()[-4000:]


@pytest.fixture(autouse=True)
def still_serving(request):
    yield
    if "daemon" in request.fixturenames:
        d = request.getfixturevalue("daemon")
        assert d.alive(), d.log()[-4000:]
        assert scrape_ok(d)


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
    b"GET /" + b"m" * 2000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # longer than any path served
    # Valid enough to be served: HTTP lets servers accept bare LF, and a GET's body
    # (here a broken chunk) is never read, since the answer goes out before it.
    b"GET /metrics HTTP/1.1\nHost: x\n\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]
MAY_BE_SERVED = MALFORMED[-2:]


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_requests_get_no_metrics_and_no_crash(daemon, data):
    status, _, body = exchange(daemon, data)
    # A refusal (4xx/5xx, or a closed connection), or harmlessly the landing page.
    if data not in MAY_BE_SERVED:
        assert b"xferd_build_info" not in body, (status, body[:200])
        assert status == 0 or status >= 400 or body.startswith(b"<!DOCTYPE"), status


def test_oversized_headers_are_refused(daemon):
    status, _, _ = request(daemon, headers="X-Big: " + "a" * 65536 + "\r\n")
    assert status in (0, 400, 413, 431), status
    many = "".join(f"X-H{i}: {'v' * 60}\r\n" for i in range(2000))
    status, _, _ = request(daemon, headers=many)
    assert status in (0, 400, 413, 431), status
    status, _, _ = request(daemon, path="/" + "p" * 65536)
    assert status in (0, 400, 414, 431), status
    status, _, _ = request(daemon, path="/" + "p" * 1500)
    assert status == 414, status


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
                                    "CONNECT", "PROPFIND", "FOO"])
def test_methods_other_than_get_and_head_get_405(daemon, method):
    status, headers, body = exchange(
        daemon, f"{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                "Connection: close\r\n\r\nbody".encode())
    assert status == 405, (status, body[:200])
    assert headers.get("allow") == "GET, HEAD"


def test_head_has_no_body(daemon):
    status, headers, body = request(daemon, method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["content-length"]) > 0


@pytest.mark.parametrize("path", [
    "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2f..%2fetc%2fpasswd",
    "/metrics/../../../etc/passwd", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "//etc/passwd",
    "/static/../../../../etc/shadow", "/.%2e/.%2e/etc/passwd", "/%252e%252e/etc/passwd",
    "/proc/self/environ", "/metrics%00.html", "/./metrics/",
])
def test_path_traversal_is_404(daemon, path):
    status, _, body = request(daemon, path=path)
    assert status in (400, 404), status
    assert b"root:" not in body and b"PATH=" not in body


@pytest.mark.parametrize("encoded,plain", [
    ("/api%2fv1%2fstatus", "/api/v1/status"), ("/api/v1/%73tatus", "/api/v1/status"),
    ("/%61pi/v1/status", "/api/v1/status"), ("/%6detrics", "/metrics"),
    ("/metric%73", "/metrics"), ("/%68ealthz", "/healthz"), ("/healthz%00", "/healthz"),
])
def test_paths_are_matched_as_sent_not_decoded(daemon, encoded, plain):
    """A path is compared as it was sent (docs/http.md): its percent-encoded form, which a
    front proxy's rule on the raw path would not match either, is not the page."""
    assert request(daemon, path=plain)[0] == 200
    assert request(daemon, path=encoded)[0] == 404


def test_gzip_is_served_when_asked_and_is_the_same_exposition(daemon):
    status, headers, body = request(daemon, headers="Accept-Encoding: gzip\r\n")
    assert status == 200
    assert headers.get("content-encoding") == "gzip"
    assert headers.get("vary") == "Accept-Encoding"
    text = gzip.decompress(body).decode()
    plain = request(daemon)[2].decode()
    names = lambda t: {k[0] for k in parse_metrics(t)}  # noqa: E731
    assert names(text) == names(plain)
    assert len(body) * 4 < len(plain), (len(body), len(plain))
    status, headers, _ = request(daemon, headers="Accept-Encoding: gzip;q=0, identity\r\n")
    assert status == 200 and "content-encoding" not in headers


def test_slow_clients_do_not_block_scrapes(daemon):
    """50 connections trickle a request at a byte a second; real scrapes still get through."""
    stop = threading.Event()
    socks = [connect(daemon, 5) for _ in range(50)]

    def trickle():
        payload = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"s" * 1000
        for i in range(len(payload)):
            if stop.is_set():
                return
            for s in socks:
                try:
                    s.send(payload[i:i + 1])
                except (OSError, ssl.SSLError):
                    pass
            stop.wait(1.0)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(2)
        for _ in range(5):
            start_t = time.monotonic()
            assert scrape_ok(daemon)
            assert time.monotonic() - start_t < 10
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def test_tricklers_are_cut_at_the_header_timeout(daemon):
    """Connections that never finish a request are closed after the header timeout (5 s,
    spread over 3.75-6.25 s), so they cannot hold slots for the 30 s request deadline."""
    socks = [connect(daemon, 30, source="127.0.0.2") for _ in range(40)]
    start_t = time.monotonic()
    for s in socks:
        s.send(b"GET /metrics HTTP/1.1\r\n")
    closed = 0
    for s in socks:
        try:
            data = s.recv(1)
        except (OSError, ssl.SSLError):
            data = b""
        closed += data == b""
        s.close()
    assert closed == 40
    assert time.monotonic() - start_t < 15


def test_idle_sockets_do_not_starve_scrapes(daemon):
    """1,000 idle connections from one address (over TLS: half-finished handshakes), reopened
    as the server closes them: scrapes from another address are answered at once. The bound
    promised is 1 s (bench/http_idle_sockets.py checks it on a quiet machine); here every
    scrape must succeed within 5 s, a margin for sanitizer builds and shared CI machines
    (before the fix they timed out after 12-15 s)."""
    holder = IdleSockets(daemon.port, count=1000, source="127.0.0.2",
                         tls=bool(daemon.tls_ca)).start()
    try:
        assert holder.wait_held(), f"only {holder.opened} idle connections opened"
        results = [timed_scrape(daemon.port, tls_ca=daemon.tls_ca) for _ in range(20)]
    finally:
        holder.stop()
    times = [t for _, t in results]
    print(f"\n{'https' if daemon.tls_ca else 'http'}: 1000 idle sockets, 20 scrapes: "
          f"p50 {percentile(times, 0.5) * 1000:.1f} ms, p99 {percentile(times, 0.99) * 1000:.1f} "
          f"ms, max {max(times) * 1000:.1f} ms")
    assert [s for s, _ in results] == [200] * 20
    assert max(times) < 5, times


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def test_a_tls_flood_stays_within_the_memory_budget(tmp_path):
    """The review: under a flood of TLS connections RSS climbed from 13 MB to 90 MB and
    stayed (each holds ~40 KB of GnuTLS state; 1,024 were allowed, and glibc kept what they
    freed). Now at most 256 over TLS, 128 per address, and the memory goes back once the
    flood is over. Full handshakes from 16 addresses, each held open; then closed."""
    d = start(tmp_path, True)
    ctx = ssl.create_default_context(cafile=CA)
    before = rss_kib(d.proc.pid)
    held, refused = [], 0
    try:
        for i in range(600):
            try:
                s = socket.create_connection(("127.0.0.1", d.port), timeout=10,
                                             source_address=(f"127.0.1.{i % 16 + 1}", 0))
                held.append(ctx.wrap_socket(s, server_hostname="localhost"))
            except (OSError, ssl.SSLError):
                refused += 1
        during = rss_kib(d.proc.pid)
        assert scrape_ok(d), "a scrape from another address must still be answered"
    finally:
        for s in held:
            s.close()
    if not sanitizer_build():
        # A sanitizer's allocator keeps freed memory in its quarantine: RSS says nothing there.
        d.wait_for(lambda: rss_kib(d.proc.pid) <= before + 4096, 10, "memory to be handed back")
    after = rss_kib(d.proc.pid)
    print(f"\nTLS flood: {len(held)} handshakes held, {refused} refused; RSS {before / 1024:.1f} "
          f"MiB before, {during / 1024:.1f} during, {after / 1024:.1f} after")
    assert refused >= 600 - 256 - 40  # some of the held ones were closed for newcomers
    if not sanitizer_build():
        assert during <= 32 * 1024, during
    assert d.stop() == 0


def test_many_concurrent_scrapes_all_succeed(daemon):
    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(lambda _: request(daemon)[0], range(100)))
    assert results.count(200) == 100, results


def test_no_descriptor_leak_after_abuse(daemon):
    """Open fds return to where they were once abusive connections are gone."""
    def open_fds():
        return parse_metrics(request(daemon)[2].decode())[("process_open_fds", frozenset())]

    before = open_fds()
    with ThreadPoolExecutor(max_workers=len(MALFORMED)) as pool:
        list(pool.map(lambda data: exchange(daemon, data), MALFORMED))
    half_open = [connect(daemon) for _ in range(20)]
    for s in half_open:
        s.send(b"GET /met")
        s.close()
    daemon.wait_for(lambda: open_fds() <= before + 2, 30, "descriptors to be released")


def auth(user, password):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_wrong_or_missing_credentials_get_401(tmp_path, scheme):
    d = start(tmp_path, scheme == "https", {"prometheus": HASH})
    try:
        for headers in ["", auth("prometheus", "wrong"), auth("admin", "test-password"),
                        auth("prometheus", ""), "Authorization: Basic %%%\r\n",
                        "Authorization: Basic " + "A" * 8000 + "\r\n",
                        "Authorization: Digest username=prometheus\r\n"]:
            for method, path in [("GET", "/metrics"), ("GET", "/"), ("POST", "/metrics"),
                                 ("GET", "/../../etc/passwd")]:
                status, h, body = request(d, method, path, headers)
                # 429: this address failed too often and is held to one check at a time.
                assert status in (401, 429), (headers[:40], method, path, status)
                if status == 401:
                    assert h.get("www-authenticate") == 'Basic realm="xferd"'
                assert b"xferd_" not in body
        # Its right password still gets in, one check at a time.
        status, _, body = request(d, headers=auth("prometheus", "test-password"))
        assert status == 200, status
        assert d.alive()
    finally:
        assert d.stop() == 0


def flood_and_log_in(tmp_path, guessers, guess_from, login_from):
    """`guessers` clients send wrong passwords from `guess_from` as fast as they are answered;
    meanwhile three users with the right password log in once each from `login_from`, each
    uncached. Returns (the logins' (status, seconds), the guesses' statuses, exit code)."""
    users = {f"prom{i}": HASH for i in range(3)}
    d = start(tmp_path, False, users)
    stop = threading.Event()
    statuses = []

    def guess(n):
        while not stop.is_set():
            s = socket.create_connection(("127.0.0.1", d.port), 10, source_address=(guess_from, 0))
            with s:
                s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{auth('prom0', f'guess{n}')}"
                          "Connection: close\r\n\r\n".encode())
                statuses.append(s.recv(12)[9:12])
            n += guessers

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(guessers)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        logins = []
        for user in users:
            start_t = time.monotonic()
            # As a scraper does: told to come back (503: the guesses ahead took longer than
            # the 5 s wait bound), it comes back with the same login, which keeps its place.
            for _ in range(3):
                s = connect(d, source=login_from)
                with s:
                    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{auth(user, 'test-password')}"
                              "Connection: close\r\n\r\n".encode())
                    status = int(s.recv(12)[9:12] or b"0")
                if status != 503:
                    break
            logins.append((status, time.monotonic() - start_t))
    finally:
        stop.set()
        for t in threads:
            t.join()
        code = d.stop()
    print(f"\n{guessers} guessers from {guess_from}: {len(statuses)} guesses "
          f"({statuses.count(b'401')} x 401, {statuses.count(b'429')} x 429, "
          f"{statuses.count(b'503')} x 503); correct logins from {login_from}: "
          + ", ".join(f"{s} in {t * 1000:.0f} ms" for s, t in logins))
    return logins, statuses, code


def test_a_correct_login_gets_through_a_password_flood(tmp_path):
    """The review: during a wrong-password flood, a correct login that is not cached yet
    (the first scrape after a restart) got 503 every time. Guesses come from 127.0.0.2 (more
    clients than its queue holds, so some are pushed back); three users with the same
    password log in once each from 127.0.0.1, each uncached."""
    logins, statuses, code = flood_and_log_in(tmp_path, 12, "127.0.0.2", "127.0.0.1")
    assert [s for s, _ in logins] == [200, 200, 200]
    assert b"401" in statuses
    assert code == 0


def test_a_correct_login_from_the_guessing_address_gets_its_turn(tmp_path):
    """The review: from the guessing address itself, no correct login got through in four
    runs of ten (each lost the race for the address's one slot to the next guess). The
    address's logins now wait their turn in its queue (8): with 4 guessers, each correct
    login is checked after at most the 4 guesses ahead of it."""
    logins, statuses, code = flood_and_log_in(tmp_path, 4, "127.0.0.1", "127.0.0.1")
    assert [s for s, _ in logins] == [200, 200, 200]
    assert statuses.count(b"401") > 3
    assert code == 0


@pytest.mark.parametrize("guessers", [16, 24])
def test_a_correct_login_beside_many_guessers_on_its_address_gets_through(tmp_path, guessers):
    """The review: a correct login from the guessing address got 200 beside at most 8
    guessers (its queue was 8 deep): 1 in 20 with 9, none with 12 or 16 (28,648 guesses told
    429). The address's queue now holds a login per connection it may hold: every correct
    login is checked after the guesses that came before it (and one told to come back keeps
    its place), whatever the number of guessers."""
    logins, statuses, code = flood_and_log_in(tmp_path, guessers, "127.0.0.1", "127.0.0.1")
    assert [s for s, _ in logins] == [200, 200, 200]
    assert statuses.count(b"401") > guessers
    assert code == 0


def test_an_unknown_user_costs_what_a_known_one_does(tmp_path):
    """Timing must not tell which names exist: cost-5 user 3 ms, unknown user 80 ms before."""
    cost5 = "$2b$05$uwCUv.GjMulXo5oFsmr20uWkQsQj.T..rvqcdn7HtMyVgGXdW46iu"
    d = start(tmp_path, False, {"alice": cost5})
    try:
        def median_ms(user):
            times = []
            for i in range(9):
                start_t = time.monotonic()
                status, _, _ = request(d, headers=auth(user, f"wrong{i}"))
                times.append((time.monotonic() - start_t) * 1000)
                assert status in (401, 429)
                time.sleep(0.3)  # one check at a time once this address is failing
            return sorted(times)[4]
        known, unknown = median_ms("alice"), median_ms("mallory")
    finally:
        d.stop()
    print(f"\nwrong password: known user {known:.1f} ms, unknown user {unknown:.1f} ms (median of 9)")
    assert unknown < 3 * known + 5, (known, unknown)


def test_stop_does_not_wait_for_a_costly_login(tmp_path):
    """A cost-20 login made shutdown hang over 5 s. Costs above 12 are refused now, and logins
    at 12 still being checked do not hold up SIGTERM (the stop bound is 2 s)."""
    cost12 = "$2b$12$jadT/.hzfyd15AJVxz5NPeb0BD2.q7gNTWqkFgg.WPl4VaMezXkJu"
    d = start(tmp_path, False, {"prometheus": cost12})
    clients = [threading.Thread(target=request, args=(d,),
                                kwargs={"headers": auth("prometheus", f"x{i}")}) for i in range(4)]
    for t in clients:
        t.start()
    time.sleep(0.2)
    start_t = time.monotonic()
    code = d.stop()
    took = time.monotonic() - start_t
    for t in clients:
        t.join()
    assert code == 0
    assert took < 2, took
