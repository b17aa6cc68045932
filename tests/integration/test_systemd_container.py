"""The .deb and its unit under a real systemd 252 (Debian bookworm, booted in a container
with systemd-nspawn), on the simulated device: what a fleet host does with them.

The container's root is minbase + systemd, D-Bus, curl and exactly the package's Depends
(read from the built .deb), cached under the build directory. The package is installed
with apt inside it, then every promise the unit and the docs make is checked against
systemd itself: READY only after the first cycle, STATUS, reload, the watchdog, restarts,
exit 78, DynamicUser state across restart and upgrade, purge, journal fields, the security
exposure the README states, and the sandbox seen from inside the running service.

One drop-in shortens WatchdogSec from 60 s to 6 s so that a hung probe is restarted within
the test's time; every other setting is the shipped unit's. The steps run in order against
one container; a failed step skips the rest (their starting state is unknown).

Needs root, mmdebstrap and systemd-nspawn (deploy/install-deps.sh --test), and the network the
first time (the root is bootstrapped from the machine's apt mirrors, then cached; set
XFERD_CONTAINER_CACHE to keep it elsewhere). Skips with the reason otherwise.
"""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from deploy_support import SOURCE_DIR, build_deb
from systemd_container import Container, package_root, require_container_tools
from xferd_harness import parse_metrics

WATCHDOG_SEC = 6
DROP_IN = f"[Service]\n# The container test: a hung probe restarts within {WATCHDOG_SEC} s, not 60 s.\n" \
          f"WatchdogSec={WATCHDOG_SEC}s\n"
CONFIG = "/etc/xferd/xferd.toml"
STATE = "/var/lib/private/xferd/state.json"
ALL_MODES = ("pageable", "pinned", "pinned_async", "zero_copy", "managed", "managed_prefetch")
# Paths the purge comparison leaves out: logs, caches and the package manager's and
# systemd's own bookkeeping, which change whatever is installed.
CHURN = ("proc", "sys", "dev", "run", "tmp", "var/log", "var/cache", "var/lib/dpkg",
         "var/lib/apt", "var/lib/systemd/catalog", "var/lib/systemd/random-seed",
         "var/lib/systemd/timers", "etc/ld.so.cache")


def sim_config(modes=ALL_MODES, extra=""):
    """The edited conffile: the simulated device, short cycles (first cycle about 2 s)."""
    return (
        "# Edited on this host: the simulated device, 3 s cycles.\n"
        "[web]\nlisten_address = \"127.0.0.1:9742\"\n"
        "[daemon]\nstate_dir = \"/var/lib/xferd\"\n"
        "[probe]\ninterval = \"3s\"\njitter = 0\ncycle_budget = \"2.5s\"\ndeadline = \"1s\"\n"
        f"max_duty_cycle = 1.0\nmodes = {json.dumps(list(modes))}\n"
        f"{extra}"
        "[simulate]\nenabled = true\n")


HANG = "[[simulate.fault]]\nkind = \"hang\"\n"


# ---------------------------------------------------------------- the container and its tools

@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    """Version N and N+1 of the package (same files, higher version), for the upgrade."""
    require_container_tools()
    n = build_deb(tmp_path_factory.mktemp("deb-n"))
    version = subprocess.run(["dpkg-deb", "-f", str(n), "Version"], capture_output=True,
                             text=True, check=True).stdout.strip()
    n1 = build_deb(tmp_path_factory.mktemp("deb-n1"), version=f"{version}+1")
    return n, n1


@pytest.fixture(scope="module")
def box(debs, tmp_path_factory):
    started = time.monotonic()
    tar = package_root(debs[0])
    with Container.boot(tar, tmp_path_factory.mktemp("container")) as c:
        print(f"container root ready and booted in {time.monotonic() - started:.1f} s")
        # What purge must leave alone: another service's state, an admin's file in
        # /etc/xferd, a user's home, the drop-in.
        for path, text in (("/var/lib/private/othersvc/keep", "other service's state\n"),
                           ("/etc/xferd/web.yml", "# basic auth, written by the admin\n"),
                           ("/home/alice/notes.txt", "private\n"),
                           ("/etc/systemd/system/xferd.service.d/50-watchdog.conf", DROP_IN)):
            write(c, path, text)
        os.chmod(c.path("/var/lib/private"), 0o700)
        # World-writable: only the read-only mount can stop the service writing here.
        c.path("/srv/open").mkdir(parents=True)
        os.chmod(c.path("/srv/open"), 0o1777)
        srv = c.path("/srv/xferd")
        srv.mkdir(parents=True)
        for deb in debs:
            shutil.copy(deb, srv)
        c.debs = [f"/srv/xferd/{d.name}" for d in debs]
        c.before = tree(c)
        yield c
        if os.environ.get("XFERD_CONTAINER_KEEP_LOG"):
            print(c.run("journalctl", "--no-pager", "-o", "short-monotonic", check=False).stdout)
    shutil.rmtree(c.root)  # about 250 MiB; the container is off


@pytest.fixture(scope="module")
def failures_before(request):
    return request.session.testsfailed


@pytest.fixture(autouse=True)
def earlier_steps_passed(request, failures_before):
    """The steps build on each other: after a failure the container's state is unknown."""
    if request.session.testsfailed > failures_before:
        pytest.skip("an earlier step of this container test failed")


def write(c, path, text):
    p = c.path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def tree(c):
    """Every path of the container's root file system, minus CHURN."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(c.root):
        rel = os.path.relpath(dirpath, c.root)
        dirnames[:] = [d for d in dirnames
                       if os.path.normpath(os.path.join(rel, d)) not in CHURN]
        for name in dirnames + filenames:
            path = os.path.normpath(os.path.join(rel, name))
            if path not in CHURN:
                out.add("/" + path)
    return out


def show(c, *props):
    out = c.run("systemctl", "show", "xferd", *[f"--property={p}" for p in props]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def message(entry):
    m = entry.get("MESSAGE", "")
    return bytes(m).decode(errors="replace") if isinstance(m, list) else m


def cursor(c):
    """Where the journal ends now; journal(c, after=...) reads what comes next."""
    out = c.run("journalctl", "-o", "json", "-n", "1", "--no-pager").stdout.splitlines()
    return json.loads(out[-1])["__CURSOR"]


def journal(c, after=None, matches=()):
    argv = ["journalctl", "-u", "xferd", "-o", "json", "--no-pager", *matches]
    if after:
        argv.append(f"--after-cursor={after}")
    return [json.loads(line) for line in c.run(*argv).stdout.splitlines() if line.strip()]


def wait_journal(c, after, pattern, timeout):
    def find():
        return next((e for e in journal(c, after) if re.search(pattern, message(e))), None)
    return wait_for(find, timeout, f"a journal line matching {pattern!r}")


def metrics(c):
    return parse_metrics(c.run("curl", "-sf", "--max-time", "5",
                               "http://127.0.0.1:9742/metrics").stdout)


def runs(c, mode):
    return sum(v for (n, ls), v in metrics(c).items()
               if n == "xferd_probe_runs_total" and dict(ls).get("mode") == mode
               and dict(ls).get("result") == "ok")


def cycles(c):
    return sum(v for (n, _), v in metrics(c).items() if n == "xferd_cycles_total")


def wait_cycles(c, count, timeout=30):
    target = cycles(c) + count
    wait_for(lambda: cycles(c) >= target, timeout, f"{count} more probe cycles")


def wait_new_main_process(c, before, timeout):
    """The unit's state once it is active again under a main process other than before's."""
    def active_again():
        s = show(c, "ActiveState", "MainPID", "NRestarts", "InvocationID")
        return s["ActiveState"] == "active" and s["MainPID"] != before["MainPID"] and s
    return wait_for(active_again, timeout, f"xferd active again (was pid {before['MainPID']})")


def baselines(c):
    data = json.loads(c.path(STATE).read_text())
    (series,) = data["baselines"].values()  # one simulated GPU
    return series


def learned_series_logged(c, invocation):
    """How many learned series this run of the service loaded from its state file."""
    def logged():
        return next((e for e in journal(c, matches=[f"_SYSTEMD_INVOCATION_ID={invocation}"])
                     if message(e).startswith("state: ")), None)
    entry = wait_for(logged, 10, "the state line of the new run")
    return int(re.search(r"\((\d+) learned series\)", message(entry)).group(1))


# ---------------------------------------------------------------- the steps, in order

def test_apt_install_resolves_depends_and_without_a_gpu_the_service_exits_69(box):
    c = box
    r = c.run("apt-get", "install", "-y", "--no-install-recommends", c.debs[0], timeout=300)
    # The root holds exactly the Depends: apt installs xferd alone, and finds every library.
    assert "1 newly installed" in r.stdout, r.stdout
    ldd = c.run("ldd", "/usr/bin/xferd").stdout
    assert "not found" not in ldd, ldd
    assert c.run("xferd", "version").stdout.startswith("xferd ")
    verify = c.run("systemd-analyze", "verify", "xferd.service", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The postinst enabled and started it; no NVIDIA driver here: exit 69, no restart.
    assert c.run("systemctl", "is-enabled", "xferd").stdout.strip() == "enabled"
    s = show(c, "ActiveState", "SubState", "ExecMainStatus", "NRestarts", "Result")
    assert s == {"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "69",
                 "NRestarts": "0", "Result": "exit-code"}, s
    assert any("NVIDIA" in message(e) for e in journal(c)), "no reason for exit 69 in the journal"


def test_bad_config_exits_78_and_is_not_restarted(box):
    c = box
    write(c, CONFIG, sim_config().replace('interval = "3s"', 'interval = "fast"'))
    # Clear the exit-69 failure, as an operator would. (StartLimitBurst=5 in 10 minutes
    # counts every start, manual ones too; the steps below make five.)
    c.run("systemctl", "reset-failed", "xferd")
    after = cursor(c)
    assert c.run("systemctl", "start", "xferd", check=False).returncode != 0
    restart_sec = int(show(c, "RestartUSec")["RestartUSec"].rstrip("s"))
    # Past RestartSec: a restart would have happened by now.
    time.sleep(restart_sec + 1)
    s = show(c, "ActiveState", "SubState", "ExecMainStatus", "NRestarts", "MainPID")
    assert s == {"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "78",
                 "NRestarts": "0", "MainPID": "0"}, s
    starts = [e for e in journal(c, after) if message(e).startswith("Starting ")]
    assert len(starts) == 1, [message(e) for e in journal(c, after)]
    wait_journal(c, after, rf"{CONFIG}:\d+: probe\.interval", 5)


def test_active_only_after_the_first_cycle(box):
    c = box
    write(c, CONFIG, sim_config())
    c.run("systemctl", "reset-failed", "xferd")
    c.run("systemctl", "start", "--no-block", "xferd")
    seen = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1] != "active":
        assert time.monotonic() < deadline, f"not active after 60 s: {seen}"
        state = c.run("systemctl", "is-active", "xferd", check=False).stdout.strip()
        if not seen or seen[-1] != state:
            seen.append(state)
        time.sleep(0.05)
    assert "activating" in seen, f"never seen activating: {seen}"
    s = show(c, "InvocationID", "InactiveExitTimestampMonotonic",
             "ActiveEnterTimestampMonotonic")
    lines = journal(c, matches=[f"_SYSTEMD_INVOCATION_ID={s['InvocationID']}"])
    first_cycle = next(int(e["__MONOTONIC_TIMESTAMP"]) for e in lines
                       if message(e).startswith("cycle 1:"))
    started, active = int(s["InactiveExitTimestampMonotonic"]), \
        int(s["ActiveEnterTimestampMonotonic"])
    assert started < first_cycle <= active, (started, first_cycle, active)
    print(f"states {seen}; active {(active - started) / 1e6:.2f} s after start, "
          f"{(active - first_cycle) / 1e3:.1f} ms after cycle 1 ended")


def test_status_line_and_metrics_from_inside(box):
    c = box
    wait_cycles(c, 1)
    status = c.run("systemctl", "status", "xferd", "--no-pager", check=False).stdout
    # STATUS= carries a cycle's verdict summary, the one its log line ends with.
    m = re.search(r'Status: "cycle (\d+): (.+)"', status)
    assert m, status
    wait_for(lambda: any(message(e).startswith(f"cycle {m[1]}:") and message(e).endswith(m[2])
                         for e in journal(c)), 5, f"the log line of cycle {m[1]}")
    m = metrics(c)
    info = [dict(ls) for (n, ls), _ in m.items() if n == "xferd_device_info"]
    assert info and info[0]["simulated"] == "1", info
    assert runs(c, "pinned") > 0
    assert m[("xferd_config_last_reload_successful", frozenset())] == 1
    health = c.run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                   "http://127.0.0.1:9742/healthz").stdout
    assert health == "200"


def test_reload_applies_a_good_config_and_keeps_it_when_the_next_is_bad(box):
    c = box
    pid = show(c, "MainPID")["MainPID"]
    after = cursor(c)
    write(c, CONFIG, sim_config(modes=("pinned", "pageable")))
    c.run("systemctl", "reload", "xferd")
    wait_journal(c, after, r"^reload: configuration .* applied", 10)
    wait_cycles(c, 2)  # at least one whole cycle under the new config
    before = {m: runs(c, m) for m in ALL_MODES}
    wait_cycles(c, 1)
    now = {m: runs(c, m) for m in ALL_MODES}
    assert now["pinned"] > before["pinned"] and now["pageable"] > before["pageable"], now
    assert now["zero_copy"] == before["zero_copy"] and now["managed"] == before["managed"], now

    after = cursor(c)
    write(c, CONFIG, sim_config(modes=("pinned",), extra="iterations = 0\n"))
    c.run("systemctl", "reload", "xferd")
    failed = wait_journal(c, after, r"^reload failed, keeping the running configuration", 10)
    assert re.search(rf"{CONFIG}:\d+: probe\.iterations", message(failed)), message(failed)
    assert metrics(c)[("xferd_config_last_reload_successful", frozenset())] == 0
    before = {m: runs(c, m) for m in ALL_MODES}
    wait_cycles(c, 2)
    now = {m: runs(c, m) for m in ALL_MODES}
    # Still the good file's modes: pageable runs on, zero_copy stays off.
    assert now["pageable"] > before["pageable"] and now["zero_copy"] == before["zero_copy"], now
    s = show(c, "ActiveState", "MainPID")
    assert s == {"ActiveState": "active", "MainPID": pid}, s

    write(c, CONFIG, sim_config())
    c.run("systemctl", "reload", "xferd")
    wait_for(lambda: metrics(c)[("xferd_config_last_reload_successful", frozenset())] == 1,
             10, "a good reload")


def test_security_exposure_is_what_the_docs_state(box):
    c = box
    out = c.run("systemd-analyze", "security", "xferd", "--no-pager", check=False).stdout
    m = re.search(r"Overall exposure level for xferd\.service: ([0-9.]+)", out)
    assert m, out
    readme = re.search(r"`systemd-analyze security` exposure ([0-9.]+)",
                       (SOURCE_DIR / "README.md").read_text())
    operations = re.search(r"gives an\s+overall exposure of \*\*([0-9.]+)",
                           (SOURCE_DIR / "docs/operations.md").read_text())
    assert readme and operations
    print(f"systemd-analyze security xferd (running, systemd 252): {m.group(1)}")
    assert m.group(1) == readme.group(1) == operations.group(1), out


def test_the_sandbox_holds_inside_the_running_service(box):
    c = box
    pid = show(c, "MainPID")["MainPID"]
    status = dict(line.split(":\t", 1) for line in
                  c.run("cat", f"/proc/{pid}/status").stdout.splitlines() if ":\t" in line)
    uid, gid = status["Uid"].split()[0], status["Gid"].split()[0]
    assert 61184 <= int(uid) <= 65519, f"not a DynamicUser uid: {status['Uid']}"
    assert status["NoNewPrivs"] == "1"
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, f"{cap}: {status[cap]}"
    assert status["Seccomp"] == "2", "no seccomp filter"

    def inside(script):
        """A shell as the service's user, in the service's own mount namespace."""
        return c.run("nsenter", "-t", pid, "-m", "-S", uid, "-G", gid, "--",
                     "/bin/sh", "-c", script, check=False)

    # Read-only mounts everywhere else, even where file permissions would allow the write.
    for path in ("/srv/open", "/etc/xferd", "/usr/bin", "/var/lib", "/var/log", "/run",
                 "/run/lock", "/"):
        r = inside(f"echo x > {path}/.sandbox-test")
        assert r.returncode != 0 and "Read-only file system" in r.stderr, (path, r.stderr)
    # Writable: the state directory; /tmp and /var/tmp, the service's own (PrivateTmp);
    # /dev/shm (removed at stop: RemoveIPC).
    for path in ("/var/lib/xferd", "/tmp", "/var/tmp", "/dev/shm"):
        r = inside(f"echo x > {path}/.sandbox-test && echo written")
        assert r.stdout.strip() == "written", (path, r.stderr)
    for path in ("/tmp", "/var/tmp"):
        assert c.run("test", "-e", f"{path}/.sandbox-test", check=False).returncode != 0
    inside("rm /var/lib/xferd/.sandbox-test")
    r = inside("ls -A /home; cat /home/alice/notes.txt")
    assert r.returncode != 0 and "private" not in r.stdout and "alice" not in r.stdout, \
        r.stdout + r.stderr
    # /var/lib/xferd is DynamicUser's symlink into the 0700 /var/lib/private.
    assert os.readlink(c.path("/var/lib/xferd")) == "private/xferd"
    assert c.path(STATE).stat().st_uid == int(uid)
    assert c.path("/var/lib/private").stat().st_mode & 0o777 == 0o700


def test_state_survives_restart(box):
    c = box
    old = baselines(c)
    assert len(old) == 13, old.keys()
    assert c.run("test", "-e", "/dev/shm/.sandbox-test", check=False).returncode == 0
    s0 = show(c, "MainPID")
    c.run("systemctl", "restart", "xferd", timeout=60)
    # RemoveIPC=yes: what the service left in /dev/shm went with it.
    assert c.run("test", "-e", "/dev/shm/.sandbox-test", check=False).returncode != 0
    s = wait_new_main_process(c, s0, 30)
    assert learned_series_logged(c, s["InvocationID"]) == len(old)
    wait_cycles(c, 1)
    new = baselines(c)
    assert all(old[k][-1] in new[k] and len(new[k]) > len(old[k]) for k in old), (old, new)


def test_a_hung_probe_stops_the_watchdog_and_systemd_restarts_xferd(box):
    c = box
    s0 = show(c, "MainPID", "NRestarts", "RestartUSec")
    after = cursor(c)
    write(c, CONFIG, sim_config(extra=HANG))
    c.run("systemctl", "reload", "xferd")
    hung = wait_journal(c, after, r"probe hung", 20)
    wait_for(lambda: show(c, "StatusText")["StatusText"].startswith("HUNG"), 5, "STATUS=HUNG")
    # The restarted service must not hang again.
    write(c, CONFIG, sim_config())
    timeout = wait_journal(c, after, r"Watchdog timeout", WATCHDOG_SEC + 5)
    took = (int(timeout["__MONOTONIC_TIMESTAMP"]) - int(hung["__MONOTONIC_TIMESTAMP"])) / 1e6
    assert took <= WATCHDOG_SEC + 0.5, f"watchdog fired {took:.1f} s after the hang was seen"
    restart_sec = int(s0["RestartUSec"].rstrip("s"))
    s = wait_new_main_process(c, s0, restart_sec + 30)
    assert int(s["NRestarts"]) == int(s0["NRestarts"]) + 1, s
    # systemd ends it with SIGABRT; no core file lands in the state directory.
    assert not list(c.path("/var/lib/private/xferd").glob("core*"))
    print(f"hang seen, watchdog timeout {took:.1f} s later, active again "
          f"(NRestarts {s['NRestarts']})")


def test_journal_has_gpu_mode_and_priority_fields(box):
    c = box
    entries = journal(c, matches=["SYSLOG_IDENTIFIER=xferd"])
    hung = [e for e in entries if "probe hung" in message(e)]
    assert hung, "no probe-hung line"
    e = hung[-1]
    assert e.get("GPU") == "0" and e.get("MODE") in ALL_MODES and e.get("PRIORITY") == "3", e
    # The query the docs show finds it.
    found = journal(c, matches=["GPU=0", f"MODE={e['MODE']}"])
    assert any("probe hung" in message(x) for x in found)
    cycle = next(x for x in entries if message(x).startswith("cycle "))
    assert cycle.get("PRIORITY") == "6" and "GPU" not in cycle, cycle


def test_kill_9_restarts_with_the_state_kept(box):
    c = box
    s0 = show(c, "MainPID", "NRestarts", "RestartUSec")
    old = baselines(c)
    after = cursor(c)
    c.run("kill", "-9", s0["MainPID"])
    wait_journal(c, after, r"Main process exited, code=killed, status=9/KILL", 10)
    s = wait_new_main_process(c, s0, int(s0["RestartUSec"].rstrip("s")) + 30)
    assert int(s["NRestarts"]) == int(s0["NRestarts"]) + 1, s
    assert learned_series_logged(c, s["InvocationID"]) == len(old)


def test_upgrade_keeps_the_edited_conffile_the_state_and_restarts(box):
    c = box
    conffile = c.path(CONFIG).read_text()
    assert conffile.startswith("# Edited on this host")
    s0 = show(c, "MainPID")
    old = baselines(c)
    c.run("apt-get", "install", "-y", "--no-install-recommends", c.debs[1], timeout=300)
    version = c.run("dpkg-query", "-W", "-f=${Version}", "xferd").stdout
    assert version.endswith("+1"), version
    assert c.path(CONFIG).read_text() == conffile
    assert not list(c.path("/etc/xferd").glob("xferd.toml.dpkg-*"))
    s = wait_new_main_process(c, s0, 30)  # the postinst restarted it
    assert learned_series_logged(c, s["InvocationID"]) == len(old)
    assert c.run("systemctl", "is-enabled", "xferd").stdout.strip() == "enabled"


def test_a_disabled_service_stays_disabled_and_stopped_across_a_reinstall(box):
    c = box
    c.run("systemctl", "disable", "--now", "xferd")
    c.run("apt-get", "install", "-y", "--reinstall", c.debs[1], timeout=300)
    assert c.run("systemctl", "is-enabled", "xferd", check=False).stdout.strip() == "disabled"
    assert c.run("systemctl", "is-active", "xferd", check=False).stdout.strip() == "inactive"


def test_purge_removes_what_the_package_owns_and_nothing_else(box):
    c = box
    c.run("apt-get", "purge", "-y", "xferd", timeout=300)
    after = tree(c)
    assert after == c.before, (f"left behind: {sorted(after - c.before)}; "
                               f"removed: {sorted(c.before - after)}")
    assert not c.path("/var/lib/private/xferd").exists()
    assert show(c, "LoadState")["LoadState"] == "not-found"
