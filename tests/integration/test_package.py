"""The .deb built by CPack: its contents and control data, and (as root, on a throwaway
machine such as CI) a real dpkg install, `xferd version` from it, and removal."""
import fcntl
import os
import re
import subprocess
import time

import pytest

from deploy_support import SOURCE_DIR, UNIT_FILE, build_deb, require_tool

REQUIRED_FILES = {
    "./usr/bin/xferd",
    "./usr/lib/systemd/system/xferd.service",
    "./etc/xferd/xferd.toml",
    "./usr/share/xferd/dashboards/xferd-device.json",
    "./usr/share/xferd/dashboards/xferd-fleet.json",
    "./usr/share/xferd/prometheus/xferd.rules.yml",
    "./usr/share/xferd/prometheus/prometheus.yml",
    "./usr/share/xferd/grafana/provisioning/datasources/xferd.yml",
    "./usr/share/xferd/grafana/provisioning/dashboards/xferd.yml",
    "./usr/share/xferd/kubernetes/daemonset.yaml",
    "./usr/share/xferd/kubernetes/prometheusrule.yaml",
    "./usr/share/doc/xferd/operations.md",
}


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    return build_deb(tmp_path_factory.mktemp("cpack"))


def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb", *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout


def test_contents(deb):
    listing = dpkg_deb("-c", str(deb))
    files = {line.split()[-1] for line in listing.splitlines()}
    missing = REQUIRED_FILES - files
    assert not missing, f"missing from the .deb: {sorted(missing)}"
    assert not any("/build" in f or f.endswith(".o") for f in files)


def test_control(deb):
    info = dpkg_deb("-I", str(deb))
    assert re.search(r"^ Package: xferd$", info, re.M)
    depends = re.search(r"^ Depends: (.*)$", info, re.M).group(1)
    # Computed by dpkg-shlibdeps from the binary, not written by hand.
    # procps: /bin/kill, which the unit's ExecReload runs.
    for lib in ("libc6", "libstdc++6", "libprometheus-cpp-core", "libmicrohttpd", "libsystemd0",
                "procps"):
        assert lib in depends, f"Depends lacks {lib}: {depends}"
    # Marked as a conffile: local edits survive upgrades.
    assert dpkg_deb("--info", str(deb), "conffiles").split() == ["/etc/xferd/xferd.toml"]
    assert "postinst" in info and "prerm" in info and "postrm" in info


def test_extracted_binary_runs_and_files_match_the_source(deb, tmp_path):
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=60)
    r = subprocess.run([str(root / "usr/bin/xferd"), "version"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("xferd "), r.stdout
    assert (root / "usr/lib/systemd/system/xferd.service").read_text() == UNIT_FILE.read_text()
    assert (root / "etc/xferd/xferd.toml").read_text() == \
        (SOURCE_DIR / "deploy/xferd.toml").read_text()
    # The shipped example config is valid for the shipped binary.
    r = subprocess.run([str(root / "usr/bin/xferd"), "check-config",
                        str(root / "etc/xferd/xferd.toml")], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def dpkg(*args, timeout=300):
    """dpkg, waiting for the lock when another package operation holds it."""
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(["dpkg", *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode == 0 or "lock" not in r.stderr or time.monotonic() > deadline:
            return r
        time.sleep(2)


def test_dpkg_install_run_remove(deb):
    if os.geteuid() != 0:
        pytest.skip("dpkg -i needs root: CI runs this as root on a throwaway machine")
    # Several build directories on one machine (plain and sanitizer builds, parallel CI
    # jobs) must not install and remove the package under each other.
    with open("/run/lock/xferd-package-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        install_run_remove(deb)


def install_run_remove(deb):
    if subprocess.run(["dpkg-query", "-W", "xferd"], capture_output=True).returncode == 0:
        pytest.skip("an xferd package is already installed here; not replacing it")
    r = dpkg("-i", str(deb))
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        v = subprocess.run(["/usr/bin/xferd", "version"], capture_output=True, text=True,
                           timeout=30)
        assert v.returncode == 0 and v.stdout.startswith("xferd "), v.stdout + v.stderr
        # Now that /usr/bin/xferd exists, verify the unit exactly as installed.
        analyze = require_tool("systemd-analyze")
        unit = "/usr/lib/systemd/system/xferd.service"
        a = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60)
        assert a.returncode == 0 and a.stdout + a.stderr == "", a.stdout + a.stderr
        status = subprocess.run(["dpkg-query", "-s", "xferd"], capture_output=True, text=True).stdout
        assert "/etc/xferd/xferd.toml" in status  # listed under Conffiles
    finally:
        removed = dpkg("-r", "xferd")
        purged = dpkg("-P", "xferd")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert not os.path.exists("/usr/bin/xferd")
    assert not os.path.exists("/etc/xferd/xferd.toml")
