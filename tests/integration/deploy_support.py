"""Shared pieces of the deploy-side integration tests (unit, package, rules, dashboards,
Kubernetes, fleet): where things are, and small helpers that keep the tests hermetic."""
import os
import pathlib
import re
import shutil
import socket
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(
    os.environ.get("XFERD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD_DIR = pathlib.Path(os.environ.get("XFERD_BUILD_DIR", SOURCE_DIR / "build"))
XFERD_BINARY = pathlib.Path(os.environ.get("XFERD_BINARY", BUILD_DIR / "xferd")).resolve()

UNIT_FILE = SOURCE_DIR / "deploy/systemd/xferd.service"
RULES_FILE = SOURCE_DIR / "deploy/prometheus/xferd.rules.yml"
RULES_TEST_FILE = SOURCE_DIR / "deploy/prometheus/xferd.rules.test.yml"
# The same alerts on what the fleet metrics profile exports ([metrics] profile = "fleet").
RULES_FLEET_TEST_FILE = SOURCE_DIR / "deploy/prometheus/xferd.rules.fleet.test.yml"
DASHBOARD_DIR = SOURCE_DIR / "dashboards"
KUBERNETES_DIR = SOURCE_DIR / "deploy/kubernetes"


def require_tool(name):
    """The path of a tool from the Debian packages the tests depend on; skip if absent."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: run deploy/install-deps.sh --test")
    return path


def require_binary():
    if not XFERD_BINARY.is_file():
        pytest.fail(f"xferd binary not found at {XFERD_BINARY}: build it first "
                    "(cmake --build <dir> --target xferd) or set XFERD_BINARY")
    return XFERD_BINARY


def free_port():
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sanitizer_build():
    """The sanitizer of this build directory ("address", "thread"), or "" for a plain build."""
    cache = BUILD_DIR / "CMakeCache.txt"
    if not cache.is_file():
        return ""
    m = re.search(r"^XFERD_SANITIZE:\w+=(\w*)$", cache.read_text(), re.M)
    return m.group(1) if m else ""


def build_deb(out_dir, version=None):
    """The .deb of this build directory, made by cpack into out_dir; `version` overrides
    the package version (an upgrade test needs a second, newer package)."""
    if sanitizer_build():
        pytest.skip(f"sanitizer build ({sanitizer_build()}): the package is tested in the plain build")
    cpack = require_tool("cpack")
    require_tool("dpkg-deb")
    config = BUILD_DIR / "CPackConfig.cmake"
    assert config.is_file(), f"{config} missing: configure the build first"
    cmd = [cpack, "-G", "DEB", "--config", str(config), "-B", str(out_dir)]
    if version:
        cmd += ["-D", f"CPACK_PACKAGE_VERSION={version}"]
    r = subprocess.run(cmd, cwd=BUILD_DIR, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    (package,) = pathlib.Path(out_dir).glob("xferd_*.deb")
    return package
