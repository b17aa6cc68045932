"""The image of deploy/kubernetes/Dockerfile, built and run with podman as daemonset.yaml runs
it: its user (65534), a read-only root, every capability dropped, no privilege escalation,
the ConfigMap's config mounted read-only at /etc/xferd and a writable state directory, on the
simulated device. `xferd health` run inside it answers 0, then 1 after a fault.

No registry is used: the base image is a Debian 12 root made here by mmdebstrap from the
apt mirrors, with the package's dependencies in it, imported into a podman store private to
the test, so the Dockerfile's build needs no network. The root's tarball is cached under
the build directory, shared with the systemd container test (XFERD_CONTAINER_CACHE,
default <build>/container-root; docs/operations.md says how long it takes to make and to
use). Podman runs with runc and cgroupfs (crun refuses
this machine's hybrid cgroup hierarchy) and a containers.conf without default ulimits.

Skips, with the reason, without root, podman, runc or mmdebstrap, or where podman cannot
start a container here (the reason podman gives is in the skip message)."""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from deploy_support import KUBERNETES_DIR, build_deb
from systemd_container import package_root

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="building and running images with podman needs root")

IMAGE = "localhost/xferd-test:latest"
# overlay needs the kernel's overlayfs over a file system that supports it (ext4, xfs);
# XFERD_PODMAN_STORAGE=vfs copies each layer instead (slower, works anywhere).
STORAGE_DRIVER = os.environ.get("XFERD_PODMAN_STORAGE", "overlay")
NAME = "xferd-image-test"


class Podman:
    """podman with a store, a run directory and a containers.conf of the test's own."""

    def __init__(self, workdir):
        for tool, package in (("podman", "podman"), ("runc", "runc"), ("mmdebstrap", "mmdebstrap")):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} not found (package {package}): run deploy/install-deps.sh --test")
        self.dir = Path(workdir)
        conf = self.dir / "containers.conf"
        # Containers get no default ulimits podman would set (the machine's hard limits may be
        # lower than podman's defaults).
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf))
        self.base = ["podman", "--root", str(self.dir / "storage"), "--runroot",
                     str(self.dir / "run"), "--storage-driver", STORAGE_DRIVER, "--runtime", "runc",
                     "--cgroup-manager", "cgroupfs", "--events-backend", "none"]

    def __call__(self, *args, check=True, timeout=600):
        r = subprocess.run([*self.base, *args], capture_output=True, text=True, env=self.env,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {r.returncode}:\n"
                                 f"{r.stdout[-3000:]}{r.stderr[-3000:]}")
        return r

    def reset(self):
        self("rm", "--force", "--all", check=False, timeout=120)
        self("system", "reset", "--force", check=False, timeout=300)


def daemonset_container():
    docs = [d for d in yaml.safe_load_all((KUBERNETES_DIR / "daemonset.yaml").read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def configmap_config():
    """The ConfigMap's xferd.toml, on the simulated device with a short interval."""
    (cm,) = [d for d in yaml.safe_load_all((KUBERNETES_DIR / "configmap.yaml").read_text())
             if d and d["kind"] == "ConfigMap"]
    text = cm["data"]["xferd.toml"]
    assert 'interval = "60s"' in text
    return text.replace('interval = "60s"', 'interval = "1s"\njitter = 0')


def simulated(config, faults=""):
    return config + "\n[simulate]\nenabled = true\ntime_scale = 0.0\n" + faults


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    p = Podman(tmp_path_factory.mktemp("podman"))
    yield p
    p.reset()


@pytest.fixture(scope="module")
def image(podman, tmp_path_factory):
    context = tmp_path_factory.mktemp("context")
    deb = build_deb(context)
    started = time.monotonic()
    tar = package_root(deb)
    print(f"base root {tar.name}: {tar.stat().st_size / 2**20:.0f} MiB, ready in "
          f"{time.monotonic() - started:.1f} s")
    started = time.monotonic()
    r = podman("import", str(tar), "localhost/xferd-base:test", check=False)
    if r.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {r.stderr.strip()[-500:]}")
    podman("build", "--network", "none", "--build-arg", "BASE=localhost/xferd-base:test", "-f",
           str(KUBERNETES_DIR / "Dockerfile"), "-t", IMAGE, str(context))
    print(f"image built in {time.monotonic() - started:.1f} s (offline: --network none)")
    return IMAGE


@pytest.fixture
def pod(podman, image, tmp_path):
    """The container as the DaemonSet runs it; yields a handle to exec in it and reload it."""
    pod_spec, spec = daemonset_container()
    security = {**pod_spec["securityContext"], **spec["securityContext"]}
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "xferd.toml").write_text(simulated(configmap_config()))
    config_dir.chmod(0o755)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    # What the init container does: hand the state directory to the unprivileged user.
    os.chown(state_dir, security["runAsUser"], security["runAsGroup"])
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    args = ["run", "--detach", "--name", NAME, "--network", "none",
            "--user", f"{security['runAsUser']}:{security['runAsGroup']}",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    assert security["readOnlyRootFilesystem"] is True
    args.append("--read-only")
    args += ["-v", f"{config_dir}:{mounts['config']['mountPath']}:ro",
             "-v", f"{state_dir}:{mounts['state']['mountPath']}"]
    args += [image, *spec["args"]]
    podman("rm", "--force", NAME, check=False)
    r = podman(*args, check=False)
    if r.returncode != 0:
        pytest.skip("podman cannot run a container on this machine: "
                    + (r.stderr.strip() or r.stdout.strip())[-800:])

    class Pod:
        config = config_dir / "xferd.toml"
        state = state_dir

        @staticmethod
        def exec(*command, timeout=60):
            return podman("exec", NAME, *command, check=False, timeout=timeout)

        @staticmethod
        def logs():
            r = podman("logs", NAME, check=False)
            return r.stdout + r.stderr

        @staticmethod
        def health():
            r = podman("exec", NAME, "/usr/bin/xferd", "health", check=False, timeout=60)
            return r.returncode, r.stdout.strip()

    try:
        yield Pod
    finally:
        print(Pod.logs()[-3000:])
        podman("rm", "--force", "--time", "2", NAME, check=False, timeout=120)


def wait(what, predicate, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last[0]:
            return last[1]
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: last {last[1]!r}")


def test_image_runs_as_the_daemonset_and_health_answers(pod, podman):
    # The user, the read-only root and the capabilities are what the DaemonSet asks for.
    r = pod.exec("/bin/sh", "-c", "id -u; id -g; touch /usr/x 2>&1; grep CapEff /proc/self/status")
    uid, gid, touch, caps = r.stdout.strip().splitlines()
    assert (uid, gid) == ("65534", "65534")
    assert "Read-only file system" in touch, touch
    assert caps.split()[1] == "0000000000000000", caps

    rc, line = wait("xferd health to answer 0", lambda: ((h := pod.health())[0] == 0, h), 60)
    assert line == "OK: 1 GPU within band", line
    assert "SIMULATED" in pod.logs() or "simulated" in pod.logs().lower()

    # A fault, applied as a reload (SIGHUP), as editing the ConfigMap and rolling would.
    pod.config.write_text(simulated(configmap_config(),
                                    '[[simulate.fault]]\nkind = "degrade"\nfactor = 0.5\n'))
    podman("kill", "--signal", "HUP", NAME)
    rc, line = wait("xferd health to answer 1", lambda: ((h := pod.health())[0] == 1, h), 60)
    assert re.match(r"DEGRADED XFERD-30[12]/diagnose gpu0 pinned ", line), line
    # The state directory is the only place it writes: the baselines and the incident.
    state = (pod.state / "state.json").read_text()
    assert '"incidents"' in state and '"degraded"' in state


def monitor_rules():
    """The rules of the node-problem-detector monitor shipped with the manifests."""
    import json
    (cm,) = [d for d in yaml.safe_load_all(
        (KUBERNETES_DIR / "node-problem-detector/xferd-monitor.yaml").read_text()) if d]
    return json.loads(cm["data"]["xferd-monitor.json"])["rules"]


def test_the_health_bundle_runs_where_nothing_else_is(pod, podman, tmp_path):
    # node-problem-detector's image has none of xferd's libraries: the bundle the init
    # container copies must run in an image that holds nothing but itself.
    wait("xferd health to answer 0", lambda: ((h := pod.health())[0] == 0, h), 60)
    context = tmp_path / "npd"
    context.mkdir()
    podman("cp", f"{NAME}:/usr/lib/xferd/health", str(context / "xferd"))
    (context / "Containerfile").write_text("FROM scratch\nCOPY xferd /opt/xferd\n")
    podman("build", "--network", "none", "-f", str(context / "Containerfile"), "-t",
           "localhost/xferd-npd-standin:test", str(context))
    (rule,) = [r for r in monitor_rules() if r["type"] == "permanent"]
    args = list(rule["args"])
    # No cluster DNS here: the stand-in shares the xferd container's network namespace, where
    # the daemon listens on 127.0.0.1:9742; the rest of the rule is run as shipped.
    args[args.index("--url") + 1] = "http://127.0.0.1:9742"
    r = podman("run", "--rm", "--network", f"container:{NAME}", "--user", "65534:65534",
               "--read-only", "--cap-drop", "ALL", "localhost/xferd-npd-standin:test",
               rule["path"], *args, check=False, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "OK: 1 GPU within band"
    size = sum(f.stat().st_size for f in (context / "xferd").rglob("*") if f.is_file())
    print(f"health bundle: {size / 2**20:.1f} MiB")
