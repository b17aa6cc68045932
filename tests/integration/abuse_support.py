"""Abusive clients for the HTTP tests and the bench: idle sockets held open (reopened as the
server closes them), half-finished TLS handshakes, and a timed scrape.

    holder = IdleSockets(port, count=1000, source="127.0.0.2", tls=True)
    holder.start(); holder.wait_held(); ...; holder.stop()
    status, seconds = timed_scrape(port, tls_ca="tests/data/tls/server.crt")

Everything on loopback, bounded: a holder (a child process) runs until stop(), and each
socket it opens is closed by then.
"""
import errno
import multiprocessing
import selectors
import socket
import ssl
import time


def client_hello():
    """The bytes of a TLS ClientHello, as a client sends them first; the handshake is never
    finished by a holder that sends only these."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


class IdleSockets:
    """`count` connections from `source` that send nothing (or, with tls, a ClientHello and
    then nothing), each reopened as soon as the server closes it. They are held by a child
    process, so that the holder's work never delays the caller's own scrapes (one Python
    process would make them wait for its interpreter lock, not for the server)."""

    def __init__(self, port, count=1000, source="127.0.0.2", tls=False, cpus=None):
        self.port, self.count, self.source = port, count, source
        self.cpus = cpus  # the CPUs the holder runs on (None: any)
        self.hello = client_hello() if tls else b""
        ctx = multiprocessing.get_context("fork")
        self._opened = ctx.Value("q", 0)            # connections made
        self._closed = ctx.Value("q", 0)            # ... that the server closed
        self._held = ctx.Value("q", 0)
        self._stop = ctx.Event()
        self._process = ctx.Process(target=self._run, daemon=True)

    @property
    def opened(self):
        return self._opened.value

    @property
    def closed_by_server(self):
        return self._closed.value

    def held(self):
        return self._held.value

    def start(self):
        self._process.start()
        return self

    def wait_held(self, timeout=20):
        """Until every socket has connected once (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while self.opened < self.count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.opened >= self.count

    def stop(self):
        self._stop.set()
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _open(self, sel):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((self.source, 0))
            rc = s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return False
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            return False
        sel.register(s, selectors.EVENT_WRITE, "connecting")
        return True

    def _run(self):
        import os
        import resource
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, self.count + 256)), hard))
        sel = selectors.DefaultSelector()
        live = 0
        try:
            while not self._stop.is_set():
                while live < self.count and self._open(sel):
                    live += 1
                if live < self.count:
                    time.sleep(0.001)  # out of ports for a moment: no busy loop
                for key, _ in sel.select(timeout=0.05):
                    s = key.fileobj
                    if key.data == "connecting":
                        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                            sel.unregister(s)
                            s.close()
                            live -= 1
                            continue
                        with self._opened.get_lock():
                            self._opened.value += 1
                        if self.hello:
                            try:
                                s.send(self.hello)
                            except OSError:
                                pass
                        sel.modify(s, selectors.EVENT_READ, "held")
                        continue
                    try:
                        data = s.recv(65536)  # a ServerHello is read and dropped
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(s)
                        s.close()
                        live -= 1
                        with self._closed.get_lock():
                            self._closed.value += 1
                self._held.value = live
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()


def timed_scrape(port, path="/metrics", tls_ca=None, timeout=30, source="127.0.0.1",
                 nodelay=True):
    """One scrape on a new connection: (status or 0, seconds from connect to the last byte).

    With TCP_NODELAY, as Prometheus (Go's net package sets it on every TCP connection) and
    curl scrape: without it, over TLS 1.3 the request waits in the client's Nagle buffer
    until the server acknowledges the client's Finished, which the server's delayed ACK
    holds back 40 ms (docs/http.md); nodelay=False shows that."""
    start = time.monotonic()
    raw = b""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                     source_address=(source, 0))
        if nodelay:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca:
            ctx = ssl.create_default_context(cafile=tls_ca)
            s = ctx.wrap_socket(s, server_hostname="localhost")
        with s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
                      "Connection: close\r\n\r\n".encode())
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
    except OSError:
        pass
    seconds = time.monotonic() - start
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.") else 0
    return status, seconds


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
