"""deploy/slurm/xferd-slurm-health-check under a real Slurm (Debian's slurm-wlm and munge):
munged, slurmctld and slurmd on loopback, each started here in a temp directory with its own
ports, socket and state, and stopped by PID at the end. slurmd runs the health check every
HC_INTERVAL seconds against an xferd on the simulated device:

- a degrade fault drains the node within two health-check intervals, with a reason naming
  the GPU, the series and the cause;
- clearing the fault (a reload) resumes it;
- a node an administrator drained is never resumed nor relabelled, whatever xferd says.

Skips, with the reason, without root or the Slurm and munge programs."""
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from xferd_harness import BINARY, SOURCE_DIR, sim_config

HC_INTERVAL = 2  # seconds: slurm.conf HealthCheckInterval
NODE = "xferdnode"
SCRIPT = SOURCE_DIR / "deploy/slurm/xferd-slurm-health-check"
DEGRADE = {"kind": "degrade", "factor": 0.5}
ADMIN_REASON = "admin: replacing a PSU"

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="slurmctld, slurmd and munged run as root here")


def _die_with_parent():
    """In each daemon: if the test process dies, the daemon gets SIGTERM too."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    """munged, slurmctld and slurmd for one node, all in `workdir`."""

    def __init__(self, workdir, health_check):
        for tool, package in (("munged", "munge"), ("mungekey", "munge"),
                              ("slurmctld", "slurmctld"), ("slurmd", "slurmd"),
                              ("scontrol", "slurm-client")):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} not found (package {package})")
        self.dir = Path(workdir)
        self.procs = []  # (name, Popen), in start order
        munge = self.dir / "munge"
        munge.mkdir(mode=0o700)
        self.socket = munge / "munge.socket"
        subprocess.run(["mungekey", "--create", f"--keyfile={munge / 'munge.key'}"], check=True,
                       capture_output=True, timeout=60)
        host = socket.gethostname().split(".")[0]
        conf = self.dir / "slurm.conf"
        conf.write_text(f"""\
ClusterName=xferdtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.dir / 'ctld'}
SlurmdSpoolDir={self.dir / 'spool'}
SlurmctldPidFile={self.dir / 'slurmctld.pid'}
SlurmdPidFile={self.dir / 'slurmd.pid'}
SlurmctldLogFile={self.dir / 'slurmctld.log'}
SlurmdLogFile={self.dir / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
HealthCheckProgram={health_check}
HealthCheckInterval={HC_INTERVAL}
HealthCheckNodeState=ANY
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
        self.env = dict(os.environ, SLURM_CONF=str(conf))
        (self.dir / "ctld").mkdir()
        (self.dir / "spool").mkdir()

    def start(self):
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={self.socket}",
                               f"--key-file={self.socket.parent / 'munge.key'}",
                               f"--pid-file={self.socket.parent / 'munged.pid'}",
                               f"--seed-file={self.socket.parent / 'munged.seed'}"])
        self._wait("munged's socket", lambda: self.socket.exists(), 20)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self._wait("slurmctld", lambda: self.scontrol("ping", check=False).returncode == 0, 30)
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE])
        self._wait("the node to register", lambda: self.state() not in ("", "UNKNOWN"), 60)
        return self

    def _spawn(self, name, cmd):
        log = open(self.dir / f"{name}.out", "w")
        self.procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                  env=self.env, cwd=self.dir,
                                                  preexec_fn=_die_with_parent)))
        log.close()

    def _wait(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"{name} exited {p.returncode}:\n" + self.logs())
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n" + self.logs())

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs(self):
        out = ""
        for f in ("slurmctld.log", "slurmd.log", "health-check.log"):
            path = self.dir / f
            if path.exists():
                out += f"--- {f}\n" + path.read_text(errors="replace")[-2500:]
        return out

    def scontrol(self, *args, check=True):
        r = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=self.env,
                           timeout=30)
        if check and r.returncode != 0:
            raise AssertionError(f"scontrol {' '.join(args)}: {r.stdout}{r.stderr}")
        return r

    def node(self):
        return self.scontrol("-o", "show", "node", NODE, check=False).stdout

    def state(self):
        m = re.search(r" State=(\S+)", self.node())
        return m.group(1) if m else ""

    def reason(self):
        m = re.search(r" Reason=(.*?)(?: \[[^\]]*\])?\s*$", self.node())
        return m.group(1) if m else ""

    def drained(self):
        return "DRAIN" in self.state()


@pytest.fixture
def slurm(tmp_path):
    # slurmd gives the program no environment but SLURMD_NODENAME: a wrapper says where the
    # test's slurm.conf and xferd are, as an installed node has them in their usual places.
    wrapper = tmp_path / "health-check"
    config = tmp_path / "xferd.toml"
    log = tmp_path / "slurm" / "health-check.log"
    wrapper.write_text(f"""#!/bin/sh
export SLURM_CONF={tmp_path / 'slurm' / 'slurm.conf'} XFERD={BINARY} XFERD_SLURM_SYSLOG=0
echo "$(date +%T.%N) run for $SLURMD_NODENAME" >>{log}
exec {SCRIPT} --config {config} 2>>{log}
""")
    wrapper.chmod(0o755)
    (tmp_path / "slurm").mkdir()
    s = Slurm(tmp_path / "slurm", wrapper)
    s.xferd_config = config
    try:
        yield s.start()
    finally:
        s.stop()
        print(s.logs())


def write_config(d, path, **config):
    # 4 MiB: held to the band from the first reading.
    path.write_text(sim_config(sizes=('"4MiB"',), **config)
                    + f'\n[web]\nlisten_address = "{d.listen}"\n')


def health(config):
    r = subprocess.run([BINARY, "health", "--config", str(config)], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout.strip()


def until(what, predicate, timeout, slurm):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; node: {slurm.node()}"
                         f"\n{slurm.logs()}")


def test_drain_resume_and_an_administrators_drain(daemon, slurm):
    port = free_port()
    listen = f"127.0.0.1:{port}"
    d = daemon("", listen=listen)
    d.config_path = slurm.xferd_config
    write_config(d, d.config_path, interval="300ms")
    d.start().wait_ready()

    def reload(**config):
        t = len(d.log())
        write_config(d, d.config_path, interval="300ms", **config)
        d.signal(signal.SIGHUP)
        d.wait_log(r"reload: configuration .* applied", start=t)

    def xferd_says(rc):
        return until(f"xferd health to exit {rc}", lambda: health(d.config_path)[0] == rc, 60,
                     slurm)

    until("the node to be idle and not drained", lambda: slurm.state() == "IDLE", 60, slurm)

    # 1. A degrade fault: drained, with the GPU, series and cause, within two intervals.
    reload(faults=[DEGRADE])
    verdict_at = xferd_says(1)
    drained_at = until("the drain", slurm.drained, 4 * HC_INTERVAL + 5, slurm)
    assert drained_at - verdict_at <= 2 * HC_INTERVAL + 0.5, (verdict_at, drained_at)
    reason = slurm.reason()
    print(f"drained {drained_at - verdict_at:.1f} s after xferd said DEGRADED: {reason}")
    # The fault code right after the prefix, as a remediation system's regex reads it
    # (docs/health.md, "Fault codes").
    assert re.match(r"xferd: XFERD-301/diagnose gpu0 pinned ", reason), reason
    assert "below_band" in reason, reason

    # 2. Cleared (a reload): resumed, within two intervals of xferd saying ok.
    reload()
    ok_at = xferd_says(0)
    resumed_at = until("the resume", lambda: not slurm.drained(), 4 * HC_INTERVAL + 5, slurm)
    print(f"resumed {resumed_at - ok_at:.1f} s after xferd said ok")
    assert resumed_at - ok_at <= 2 * HC_INTERVAL + 0.5
    # slurmctld marks a resumed node NOT_RESPONDING until its next ping answers.
    until("the node to be idle", lambda: slurm.state() == "IDLE", 60, slurm)

    # 3. An administrator's drain survives xferd saying ok...
    slurm.scontrol("update", f"NodeName={NODE}", "State=DRAIN", f"Reason={ADMIN_REASON}")
    time.sleep(3 * HC_INTERVAL)
    assert slurm.drained() and slurm.reason() == ADMIN_REASON, slurm.node()
    # ... and xferd saying DEGRADED: not relabelled either.
    reload(faults=[DEGRADE])
    xferd_says(1)
    time.sleep(3 * HC_INTERVAL)
    assert slurm.drained() and slurm.reason() == ADMIN_REASON, slurm.node()
    assert "drained for another reason" in (slurm.dir / "health-check.log").read_text()

    # 4. Once the administrator resumes it, xferd's verdict drains it again, as its own.
    slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")
    until("xferd's drain after the administrator's resume",
          lambda: slurm.drained() and slurm.reason().startswith("xferd: "),
          4 * HC_INTERVAL + 5, slurm)
    reload()
    xferd_says(0)
    until("the resume", lambda: not slurm.drained(), 4 * HC_INTERVAL + 5, slurm)

    # 5. xferd gone (unknown): nothing changes, whichever state the node is in.
    reload(faults=[DEGRADE])
    xferd_says(1)
    until("the drain", slurm.drained, 4 * HC_INTERVAL + 5, slurm)
    d.stop()
    assert health(d.config_path)[0] == 2
    time.sleep(3 * HC_INTERVAL)
    assert slurm.drained() and slurm.reason().startswith("xferd: "), slurm.node()
    assert "no action" in (slurm.dir / "health-check.log").read_text()


def test_a_cleared_fault_resumes_the_node_with_the_shipped_defaults(daemon, slurm):
    """The issue's stale drain: the defaults (60 s cycles, the allowance, the confirmation
    rounds that re-measure pinned both ways during the fault) on simulated time. Once the
    fault is gone, xferd says ok within the bound (two intervals and two confirmation delays)
    and the node is resumed, instead of staying drained on a reading taken during the fault."""
    speedup = 60
    port = free_port()
    d = daemon("", listen=f"127.0.0.1:{port}")
    d.config_path = slurm.xferd_config

    def write(faults=()):
        text = f"[simulate]\nenabled = true\nspeedup = {speedup}\n"
        for f in faults:
            text += "[[simulate.fault]]\n" + "".join(f'{k} = {v!r}\n'.replace("'", '"')
                                                     for k, v in f.items())
        d.config_path.write_text(text + f'\n[web]\nlisten_address = "{d.listen}"\n')

    def reload(faults=()):
        t = len(d.log())
        write(faults)
        d.signal(signal.SIGHUP)
        d.wait_log(r"reload: configuration .* applied", start=t)

    write()
    d.start().wait_ready()
    until("the node to be idle and not drained", lambda: slurm.state() == "IDLE", 60, slurm)
    time.sleep(20 * 60 / speedup)  # twenty healthy minutes
    reload([{"kind": "downtrain", "gen": 4, "width": 8}])
    until("the drain", slurm.drained, 300 / speedup + 4 * HC_INTERVAL + 10, slurm)
    assert re.match(r"xferd: XFERD-\d{3}/[a-z_]+ gpu0 pinned", slurm.reason()), slurm.reason()
    time.sleep(10 * 60 / speedup)  # ten minutes of the fault
    reload()
    t0 = time.monotonic()
    until("xferd health to say ok", lambda: health(d.config_path)[0] == 0,
          2 * 150 / speedup + 10, slurm)
    until("the resume", lambda: not slurm.drained(), 4 * HC_INTERVAL + 5, slurm)
    print(f"resumed {time.monotonic() - t0:.1f} s (real) after the fault was removed")
