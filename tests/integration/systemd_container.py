"""A Debian bookworm root with a real systemd, booted with systemd-nspawn, for tests that
need systemd as PID 1 (tests/integration/test_systemd_container.py).

    tar = bootstrap_root(cache_dir, packages)      # mmdebstrap once, then cached
    with Container.boot(tar, workdir) as c:
        c.run("systemctl", "is-system-running", "--wait")

The root is built by `mmdebstrap --variant=minbase` from the machine's own apt mirrors and
kept as a tarball named after the package list, so a new dependency builds a new one. Each
test run unpacks a fresh copy: nothing installed by one run leaks into the next. The
container has its own root, PID, IPC, UTS and network namespaces (`--private-network`:
loopback only) and is always powered off at the end, also when a test fails.
"""
import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

SUITE = "bookworm"
# What the container needs besides the package's own Depends: systemd as init, D-Bus for
# `systemd-analyze security`, curl to scrape /metrics from inside.
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "curl")
BOOTSTRAP_TIMEOUT_S = 900
BOOT_TIMEOUT_S = 60
# The container's commands get this environment, not the test's.
CONTAINER_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "SYSTEMD_PAGER": "",
    "SYSTEMD_COLORS": "0",
    "DEBIAN_FRONTEND": "noninteractive",
}
# mmdebstrap's complaints when the mirrors cannot be reached (no network on this machine).
NO_NETWORK = re.compile(r"Temporary failure resolving|Could not resolve|Failed to fetch|"
                        r"Network is unreachable|Connection timed out|Could not connect|"
                        r"Unable to connect")


def require_container_tools():
    """Skip, naming the reason, where this machine cannot boot a systemd container."""
    if os.geteuid() != 0:
        pytest.skip("booting a systemd container (mmdebstrap, systemd-nspawn) needs root")
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("systemd-nspawn", "systemd-container"),
                          ("nsenter", "util-linux"), ("tar", "tar")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found (package {package}): run deploy/install-deps.sh --test")


def depends_packages(deb):
    """The package names of a .deb's Depends (first of each alternative, versions dropped)."""
    line = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()
    names = []
    for clause in filter(None, (c.strip() for c in line.split(","))):
        first = clause.split("|")[0].strip()
        names.append(re.split(r"[\s(:]", first, maxsplit=1)[0])
    return names


def bootstrap_root(cache_dir, packages):
    """The path of a tarball of a minbase bookworm root with `packages` installed: from the
    cache when one with exactly this package list exists, else made now with mmdebstrap
    (skips when the mirrors cannot be reached and nothing is cached)."""
    packages = sorted(set(packages))
    key = hashlib.sha256("\n".join([SUITE, "minbase", *packages]).encode()).hexdigest()[:16]
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tar = cache_dir / f"{SUITE}-minbase-{key}.tar"
    with open(cache_dir / "bootstrap.lock", "w") as lock:
        # Two test processes sharing the cache bootstrap once.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tar.is_file():
            return tar
        partial = tar.with_suffix(".partial.tar")
        cmd = ["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE,
               str(partial)]
        started = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=BOOTSTRAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            pytest.fail(f"mmdebstrap took more than {BOOTSTRAP_TIMEOUT_S} s: {' '.join(cmd)}")
        if r.returncode != 0:
            partial.unlink(missing_ok=True)
            tail = (r.stdout + r.stderr)[-3000:]
            unreachable = [line for line in r.stderr.splitlines() if NO_NETWORK.search(line)]
            if unreachable:
                pytest.skip(f"no cached container root ({tar}) and the apt mirrors cannot be "
                            f"reached to bootstrap one: {unreachable[0].strip()}")
            pytest.fail(f"{' '.join(cmd)} failed ({r.returncode}):\n{tail}")
        partial.rename(tar)
        print(f"bootstrapped {tar.name} in {time.monotonic() - started:.0f} s "
              f"({tar.stat().st_size / 2**20:.0f} MiB): {' '.join(packages)}")
        # Roots for older package lists are dead weight now.
        for old in cache_dir.glob(f"{SUITE}-minbase-*.tar"):
            if old != tar:
                old.unlink(missing_ok=True)
        return tar


def package_root(deb):
    """The one root both container tests start from: systemd and the package's dependencies,
    so that one mmdebstrap run (minutes on 2 cores) serves the systemd container and the
    podman image. Cached under <build>/container-root (XFERD_CONTAINER_CACHE elsewhere)."""
    from deploy_support import BUILD_DIR
    cache = Path(os.environ.get("XFERD_CONTAINER_CACHE", BUILD_DIR / "container-root"))
    return bootstrap_root(cache, [*BASE_PACKAGES, *depends_packages(deb)])


def _die_with_parent():
    """In the nspawn child: if the test process dies (a CI timeout), nspawn gets SIGTERM
    and powers the container off instead of leaving it running."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Container:
    """A booted container; use as a context manager so it is always powered off."""

    def __init__(self, root, log_path):
        self.root = Path(root)
        self.log_path = Path(log_path)
        self.nspawn = None
        self.init_pid = None

    @classmethod
    def boot(cls, tar, workdir):
        workdir = Path(workdir)
        root = workdir / "root"
        root.mkdir()
        subprocess.run(["tar", "--numeric-owner", "-xpf", str(tar), "-C", str(root)],
                       check=True, timeout=300)
        c = cls(root, workdir / "nspawn.log")
        try:
            c._start()
        except BaseException:
            c.shutdown()
            raise
        return c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def _start(self):
        log = open(self.log_path, "w")
        self.nspawn = subprocess.Popen(
            ["systemd-nspawn", "-D", str(self.root), "--boot", "--private-network",
             "--register=no", "--keep-unit", "--console=pipe", "-q"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while self.init_pid is None:
            if self.nspawn.poll() is not None:
                pytest.skip("this machine cannot boot a systemd container: systemd-nspawn "
                            f"exited {self.nspawn.returncode}: {self.log()[-1500:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no init process in the container after {BOOT_TIMEOUT_S} s:\n"
                            + self.log()[-3000:])
            self.init_pid = self._find_init()
            time.sleep(0.05)
        # Until systemd has set up its private socket, systemctl cannot connect at all.
        while True:
            r = self.run("systemctl", "is-system-running", "--wait", check=False,
                         timeout=BOOT_TIMEOUT_S)
            state = r.stdout.strip()
            if state or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if state not in ("running", "degraded"):
            pytest.fail(f"the container's systemd did not finish booting ({state!r}, "
                        f"{r.stderr.strip()}):\n"
                        + self.run("systemctl", "--failed", "--no-legend", check=False).stdout
                        + self.log()[-3000:])
        if state == "degraded":
            failed = self.run("systemctl", "--failed", "--no-legend", check=False).stdout
            print(f"container booted degraded; failed units:\n{failed}")

    def _find_init(self):
        """nspawn's child that runs systemd: the container's PID 1, seen from here."""
        pid = self.nspawn.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        for child in children:
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
            except OSError:
                continue
        return None

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def run(self, *argv, check=True, timeout=60, input=None):
        """A command inside the container (all its namespaces, its root), as root."""
        assert self.init_pid is not None, "container not booted"
        r = subprocess.run(["nsenter", "-t", str(self.init_pid), "-a", "--", *argv],
                           capture_output=True, text=True, timeout=timeout, input=input,
                           env=CONTAINER_ENV)
        if check and r.returncode != 0:
            raise AssertionError(f"in the container: {' '.join(argv)} exited {r.returncode}:\n"
                                 f"{r.stdout[-3000:]}{r.stderr[-3000:]}")
        return r

    def sh(self, script, check=True, timeout=60):
        return self.run("/bin/sh", "-c", script, check=check, timeout=timeout)

    def path(self, inside):
        """The host path of a path in the container's root file system (not of its mounts:
        /proc, /sys, /dev, /run, /tmp are the container's own)."""
        return self.root / inside.lstrip("/")

    def shutdown(self):
        """Power off: a clean `systemctl poweroff`, then SIGTERM to nspawn (which asks init
        to halt), then SIGKILL to init (which ends the whole PID namespace) and nspawn."""
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        steps = []
        if self.init_pid is not None:
            steps.append(lambda: subprocess.run(
                ["nsenter", "-t", str(self.init_pid), "-a", "--", "systemctl", "poweroff"],
                capture_output=True, timeout=15, env=CONTAINER_ENV))
        steps.append(self.nspawn.terminate)
        if self.init_pid is not None:
            steps.append(lambda: os.kill(self.init_pid, signal.SIGKILL))
        steps.append(self.nspawn.kill)
        for step in steps:
            try:
                step()
            except (OSError, subprocess.SubprocessError):
                pass
            try:
                self.nspawn.wait(timeout=20)
                return
            except subprocess.TimeoutExpired:
                continue
        raise AssertionError(f"systemd-nspawn (pid {self.nspawn.pid}) would not exit")
