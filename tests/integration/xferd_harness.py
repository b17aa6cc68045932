"""Start the real xferd binary on the simulated device and talk to it, for integration tests.

    d = Daemon(tmp_path, sim_config(interval="200ms"))
    d.start(); d.wait_ready()
    d.value("xferd_cycles_total", result="ok")
    d.stop()

Everything is hermetic: the daemon binds 127.0.0.1 port 0 (the port is read back from its
log), keeps its state in a temp directory and logs to a file the test can read.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BINARY = os.environ.get("XFERD_BINARY", "")
SOURCE_DIR = Path(os.environ.get("XFERD_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def sanitizer_build():
    """The sanitizer the binary was built with ("address", "thread") or "": a sanitizer's
    shadow memory and slowness make memory and time figures mean nothing."""
    cache = os.path.join(os.environ.get("XFERD_BUILD_DIR", ""), "CMakeCache.txt")
    if os.path.exists(cache):
        m = re.search(r"^XFERD_SANITIZE:STRING=(\w*)", open(cache).read(), re.M)
        return m.group(1) if m else ""
    return "thread" if "TSAN_OPTIONS" in os.environ else \
        "address" if "ASAN_OPTIONS" in os.environ else ""


def sim_config(interval="300ms", time_scale=0.0, faults=(), devices=1, deadline=None,
               consecutive_bad=2, extra="", sizes=('"1MiB"',), iterations=8, busy=""):
    """A TOML config for a fast simulated daemon. `faults` are dicts of [[simulate.fault]]."""
    lines = [
        "[probe]",
        f'interval = "{interval}"',
        "jitter = 0",
        f"sizes = [{', '.join(sizes)}]",
        f"iterations = {iterations}",
        "warmup = 1",
        f'deadline = "{deadline}"' if deadline else "",
        "max_duty_cycle = 1.0",
        "",
        "[health]",
        f"consecutive_bad = {consecutive_bad}",
        "",
        "[simulate]",
        "enabled = true",
        f"devices = {devices}",
        f"time_scale = {time_scale}",
        busy,
    ]
    for f in faults:
        lines.append("[[simulate.fault]]")
        for k, v in f.items():
            lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines) + "\n" + extra


# The password of the test user, and its bcrypt hash as a web config's basic_auth_users holds it.
PASSWORD = "test-password"
HASH = "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi"


def make_cert(directory, name="server", cn="localhost",
              alt_names="IP:127.0.0.1,DNS:localhost"):
    """A self-signed EC certificate and its key, made by openssl for two days:
    (directory/name.crt, directory/name.key). `alt_names` None: no subjectAltName."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    extra = ["-addext", f"subjectAltName={alt_names}"] if alt_names else []
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={cn}",
                    *extra, "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def web_config(path, cert=None, key=None, users=None):
    """Writes a web config (the exporter-toolkit's YAML) to `path`: TLS with `cert` and `key`
    where given, basic auth for `users` ({name: bcrypt hash}) where given. Returns `path`."""
    lines = []
    if cert:
        lines += ["tls_server_config:", f"  cert_file: {cert}", f"  key_file: {key}"]
    if users:
        lines.append("basic_auth_users:")
        lines += [f"  {u}: '{h}'" for u, h in users.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def small_tmpfs(mnt, size):
    """A fixture's body: a tmpfs of `size` ("64k") mounted at `mnt`, a disk that can really
    fill up, unmounted after the test. Needs mount rights (root with CAP_SYS_ADMIN); the
    test is skipped, saying so, where they are missing."""
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({r.stderr.strip()}): needs root "
                    "with CAP_SYS_ADMIN")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def fill_disk(path):
    """Writes zeros to the file `path` until its disk is full."""
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass  # full


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value} for every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


def stable_status(doc):
    """A copy of the status document without what moves by itself between two requests (the
    time, the ages, the uptime, the seconds to each series' next run)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("time")
    doc["daemon"].pop("last_cycle_age_seconds")
    doc["daemon"].pop("uptime_seconds")
    for g in doc["gpus"]:
        for s in g["series"]:
            s.pop("age_seconds")
            s["recent"].pop("age_seconds")
        for s in (g["schedule"] or {}).get("series", []):
            s.pop("next_run_in_seconds")
    return doc


class Daemon:
    def __init__(self, tmp_path, config_text, state_dir=None, args=(), env=None,
                 listen="127.0.0.1:0"):
        self.dir = Path(tmp_path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "xferd.toml"
        self.state_dir = Path(state_dir) if state_dir else self.dir / "state"
        self.log_path = self.dir / f"xferd-{time.monotonic_ns()}.log"
        self.args = list(args)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.port = None
        self.listen = listen  # --web.listen-address
        self.write_config(config_text)

    # -- lifecycle -------------------------------------------------------------------------
    def write_config(self, text):
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config_path)

    def start(self, wait_listening=True):
        assert BINARY, "XFERD_BINARY is not set (run through ctest)"
        self.log_path = self.dir / f"xferd-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        cmd = [BINARY, "run", "--config", str(self.config_path),
               "--web.listen-address", self.listen, "--state-dir", str(self.state_dir)]
        self.proc = subprocess.Popen(cmd + self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.env)
        self.started_at = time.monotonic()
        if wait_listening:
            self.port = self.wait_log(r"serving https?://[^:]+:(\d+)", timeout=20).group(1)
            self.port = int(self.port)
        return self

    def wait_ready(self, timeout=30):
        """Until /healthz answers 200 and the first cycle is done."""
        self.wait_for(lambda: self.value("xferd_cycles_total", default=0, sum_all=True) >= 1,
                      timeout, "the first probe cycle")
        return self

    def stop(self, timeout=10):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self._log.close()
        return self.proc.returncode if self.proc else None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    # -- reading -------------------------------------------------------------------------
    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern, timeout=20, start=0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log()[start:])
            if m:
                return m
            if self.proc.poll() is not None:
                raise AssertionError(f"xferd exited ({self.proc.returncode}) before /{pattern}/:\n"
                                     + self.log()[-4000:])
            time.sleep(0.05)
        raise AssertionError(f"no /{pattern}/ in the log within {timeout} s:\n" + self.log()[-4000:])

    def url(self, path="/metrics"):
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path="/metrics", timeout=10):
        """(status, body) of a GET."""
        try:
            with urllib.request.urlopen(self.url(path), timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def scrape(self):
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}: {body[:500]}"
        return body

    def metrics(self):
        return parse_metrics(self.scrape())

    def value(self, name, default=None, sum_all=False, **labels):
        """One sample's value; with sum_all the sum of every sample of `name` matching labels."""
        want = {k: str(v) for k, v in labels.items()}
        total, found = 0.0, False
        for (n, ls), v in self.metrics().items():
            if n != name or not want.items() <= dict(ls).items():
                continue
            if not sum_all:
                return v
            total, found = total + v, True
        if found:
            return total
        if default is not None:
            return default
        raise AssertionError(f"no {name}{want} in the scrape")

    def wait_for(self, predicate, timeout=30, what="the condition"):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"xferd exited ({self.proc.returncode}) waiting for {what}:\n"
                                     + self.log()[-4000:])
            try:
                if predicate():
                    return
            except (AssertionError, OSError, urllib.error.URLError) as e:
                last_error = e
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what} ({last_error}):\n"
                             + self.log()[-4000:])


class NotifyListener:
    """A unix datagram socket standing in for systemd's NOTIFY_SOCKET; records each message
    with the monotonic time it arrived."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if len(os.fsencode(self.path)) >= 100:
            # A socket's address holds 107 bytes: under a long temporary directory the
            # listener takes an abstract name instead, which NOTIFY_SOCKET names with '@'
            # (sd_notify(3)) as systemd itself may.
            name = f"xferd-notify-{os.getpid()}-{time.monotonic_ns()}"
            self.sock.bind("\0" + name)
            self.path = "@" + name
        else:
            self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages = []  # (monotonic seconds, text)
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.messages.append((time.monotonic(), data.decode(errors="replace")))

    def texts(self):
        with self._lock:
            return [m for _, m in self.messages]

    def times_of(self, prefix):
        with self._lock:
            return [t for t, m in self.messages if m.startswith(prefix)]

    def wait_for(self, prefix, timeout=20, after=0.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t in self.times_of(prefix):
                if t >= after:
                    return t
            time.sleep(0.02)
        raise AssertionError(f"no {prefix!r} notification within {timeout} s; got {self.texts()}")

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()
