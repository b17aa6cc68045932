"""Shared pieces of the deploy-side integration tests (unit, package, rules, dashboards,
Kubernetes, fleet): where things are, and small helpers that keep the tests hermetic."""
import os
import pathlib
import shutil
import socket

import pytest

SOURCE_DIR = pathlib.Path(
    os.environ.get("XFERD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD_DIR = pathlib.Path(os.environ.get("XFERD_BUILD_DIR", SOURCE_DIR / "build"))
XFERD_BINARY = pathlib.Path(os.environ.get("XFERD_BINARY", BUILD_DIR / "xferd")).resolve()

UNIT_FILE = SOURCE_DIR / "deploy/systemd/xferd.service"
RULES_FILE = SOURCE_DIR / "deploy/prometheus/xferd.rules.yml"
RULES_TEST_FILE = SOURCE_DIR / "deploy/prometheus/xferd.rules.test.yml"
DASHBOARD_DIR = SOURCE_DIR / "dashboards"
KUBERNETES_DIR = SOURCE_DIR / "deploy/kubernetes"


def require_tool(name):
    """The path of a tool from the Debian packages the tests depend on; skip if absent."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: run deploy/install-deps.sh")
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
