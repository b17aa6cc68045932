"""The shipped systemd unit: systemd's own checks pass, and the settings the daemon's
contract with systemd depends on are there."""
import configparser
import re
import subprocess

import pytest

from deploy_support import UNIT_FILE, require_binary, require_tool


def unit_for_this_build(tmp_path):
    """The shipped unit with ExecStart pointed at the binary just built, so that `verify`
    checks a real executable rather than /usr/bin/xferd, which a build machine lacks."""
    text = UNIT_FILE.read_text()
    assert "ExecStart=/usr/bin/xferd " in text
    text = text.replace("ExecStart=/usr/bin/xferd ", f"ExecStart={require_binary()} ")
    unit = tmp_path / "xferd.service"
    unit.write_text(text)
    return unit


def directives(section):
    """Every `Key=value` of one section, in order; repeated keys kept (DeviceAllow=...)."""
    out, current = [], None
    for raw in UNIT_FILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            key, _, value = line.partition("=")
            out.append((key, value))
    return out


def values(key, section="Service"):
    return [v for k, v in directives(section) if k == key]


def test_systemd_analyze_verify_prints_nothing(tmp_path):
    tool = require_tool("systemd-analyze")
    unit = unit_for_this_build(tmp_path)
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "", f"verify printed:\n{r.stdout}{r.stderr}"


def test_security_exposure_at_most_2(tmp_path):
    tool = require_tool("systemd-analyze")
    unit = unit_for_this_build(tmp_path)
    r = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(unit)],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for xferd\.service: ([0-9.]+)", r.stdout)
    assert m, f"no exposure line in:\n{r.stdout}\n{r.stderr}"
    exposure = float(m.group(1))
    print(f"systemd-analyze security exposure: {exposure}")
    assert exposure <= 2.0, r.stdout


def test_notify_watchdog_and_reload_contract():
    assert values("Type") == ["notify"]
    assert values("NotifyAccess") == ["main"]
    (watchdog,) = values("WatchdogSec")
    assert watchdog and watchdog != "0"
    assert values("ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert values("Restart") == ["on-failure"]
    (prevent,) = values("RestartPreventExitStatus")
    # 78 = invalid config, 69 = no GPU (platform/exit_codes.h): restarting fixes neither.
    assert {"78", "69"} <= set(prevent.split())
    assert values("StateDirectory") == ["xferd"]
    assert values("ExecStart")[0].startswith("/usr/bin/xferd run --config /etc/xferd/xferd.toml")


def test_runs_unprivileged_but_can_open_the_gpu():
    assert values("DynamicUser") == ["yes"] or values("User") not in ([], ["root"])
    assert values("CapabilityBoundingSet") == [""]
    assert values("NoNewPrivileges") == ["yes"]
    # PrivateDevices= would hide /dev/nvidia*: the device cgroup is closed instead.
    assert values("PrivateDevices") in ([], ["no"])
    assert values("DevicePolicy") == ["closed"]
    allowed = {v.split()[0] for v in values("DeviceAllow")}
    assert {"char-nvidia*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset", "/dev/nvmap", "/dev/nvhost-ctrl-gpu"} <= allowed
    assert values("LimitMEMLOCK"), "pinned probe buffers need RLIMIT_MEMLOCK"
    assert values("ProtectSystem") == ["strict"]


def test_unit_parses_as_ini():
    # Duplicate keys are legal in units; strict=False keeps the last one.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(UNIT_FILE)
    assert {"Unit", "Service", "Install"} <= set(parser.sections())
    assert parser["Install"]["WantedBy"] == "multi-user.target"
