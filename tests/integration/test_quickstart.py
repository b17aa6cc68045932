"""deploy/quickstart.sh with the binary already built (XFERD_BINARY): the flags given to
the script win over its own defaults, and XFERD_LISTEN / XFERD_STATE_DIR set those. And what
it installs and builds: only what running the daemon needs (the test tools are
tests/run.sh's), only the daemon, the quickest way (cmake stood in for by a recorder)."""
import os
import pathlib
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from deploy_support import SOURCE_DIR, free_port, require_binary

SCRIPT = SOURCE_DIR / "deploy/quickstart.sh"
INSTALL_DEPS = SOURCE_DIR / "deploy/install-deps.sh"


@pytest.fixture
def quickstart(tmp_path):
    """Start the script; returns (process, log path). Every one started is stopped."""
    started = []

    def start(*args, **env):
        log = tmp_path / f"quickstart{len(started)}.log"
        full_env = {**os.environ, "XFERD_BINARY": str(require_binary()),
                    "XFERD_STATE_DIR": str(tmp_path / "default-state"), **env}
        with open(log, "w") as out:
            p = subprocess.Popen([str(SCRIPT), *args], cwd=tmp_path, env=full_env,
                                 stdout=out, stderr=subprocess.STDOUT)
        started.append(p)
        return p, log

    yield start
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_metrics(p, log, port, timeout=30):
    """/metrics on the port (the process still running), or fail with the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            pytest.fail(f"quickstart exited {p.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                if r.status == 200:
                    return r.read().decode()
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"no /metrics on port {port} after {timeout} s:\n{log.read_text()}")


def test_listen_address_flag_wins_over_the_default_and_xferd_listen(quickstart):
    port, other = free_port(), free_port()
    p, log = quickstart("--web.listen-address", f"127.0.0.1:{port}",
                        XFERD_LISTEN=f"127.0.0.1:{other}")
    assert "xferd_build_info" in wait_metrics(p, log, port)
    text = log.read_text()
    assert f"metrics at http://127.0.0.1:{port}/metrics" in text, text
    assert "At Most 1" not in text and str(other) not in text, text


def test_equals_spelling_and_state_dir_flag_win(quickstart, tmp_path):
    port = free_port()
    state = tmp_path / "my-state"
    state.mkdir()
    p, log = quickstart(f"--web.listen-address=127.0.0.1:{port}", "--state-dir", str(state))
    wait_metrics(p, log, port)
    text = log.read_text()
    assert f"state: {state}/state.json" in text, text
    assert not (tmp_path / "default-state").exists(), "the script's own state dir was made"


def test_environment_sets_the_defaults(quickstart, tmp_path):
    port = free_port()
    state = tmp_path / "env-state"
    p, log = quickstart(XFERD_LISTEN=f"127.0.0.1:{port}", XFERD_STATE_DIR=str(state))
    wait_metrics(p, log, port)
    assert f"state: {state}/state.json" in log.read_text()


def packages(*args):
    """The packages deploy/install-deps.sh installs with `args`."""
    out = subprocess.run([str(INSTALL_DEPS), "--list", *args], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return out.split()


def test_quickstart_installs_what_the_daemon_needs_and_no_test_tool():
    daemon, everything = packages(), packages("--test")
    assert daemon and len(set(daemon)) == len(daemon), daemon
    # tests/run.sh installs all the quick start does, and the test tools besides.
    assert set(daemon) < set(everything)
    test_tools = {"prometheus", "prometheus-node-exporter", "python3-pytest", "mmdebstrap",
                  "systemd-container", "libgtest-dev", "libgmock-dev", "libbenchmark-dev",
                  "clang", "dpkg-dev", "systemd", "curl", "git", "ccache", "chromium"}
    assert not test_tools & set(daemon), test_tools & set(daemon)
    assert test_tools <= set(everything), test_tools - set(everything)
    # The daemon's build: a compiler, CMake and Ninja, and a -dev package for each library
    # the top-level CMakeLists.txt asks for.
    for tool in ("g++", "cmake", "ninja-build", "pkg-config"):
        assert tool in daemon, tool
    cmake = (SOURCE_DIR / "CMakeLists.txt").read_text()
    for library, package in (("prometheus-cpp", "prometheus-cpp-dev"), ("spdlog", "libspdlog-dev"),
                             ("CLI11", "libcli11-dev"), ("tomlplusplus", "libtomlplusplus-dev"),
                             ("nlohmann_json", "nlohmann-json3-dev"), ("yaml-cpp", "libyaml-cpp-dev"),
                             ("libmicrohttpd", "libmicrohttpd-dev"), ("libsystemd", "libsystemd-dev")):
        assert library in cmake, library
        assert package in daemon, package
    bad = subprocess.run([str(INSTALL_DEPS), "--tests"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 64 and "unknown argument" in bad.stderr, bad.stderr


def test_the_test_runner_installs_the_test_tools():
    run_sh = (SOURCE_DIR / "tests/run.sh").read_text()
    assert "install-deps.sh --test" in run_sh


def test_builds_only_the_daemon_the_quickest_way(tmp_path):
    """The script as a user runs it, with cmake recorded: one configure for a unity build
    with Ninja, without tests or benchmarks, and a build of the xferd target alone; then it
    serves (the recorder's "build" links the xferd under test into the build directory)."""
    if os.geteuid() != 0:
        pytest.skip("the script installs what is missing as root; this test runs it as root")
    missing = [p for p in packages()
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                 text=True).stdout != "install ok installed"]
    if missing:
        pytest.skip(f"the quick start's packages are not all installed: {missing}")
    bin_dir, log, build = tmp_path / "bin", tmp_path / "cmake.log", tmp_path / "qs-build"
    bin_dir.mkdir()
    recorder = bin_dir / "cmake"
    recorder.write_text(f"""#!/bin/sh
printf '%s\\n' "$*" >> '{log}'
if [ "$1" = --build ]; then mkdir -p "$2" && ln -sf '{require_binary()}' "$2/xferd"; fi
""")
    recorder.chmod(0o755)
    port = free_port()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BUILD_DIR": str(build),
           "XFERD_STATE_DIR": str(tmp_path / "state"), "XFERD_LISTEN": f"127.0.0.1:{port}"}
    env.pop("XFERD_BINARY", None)
    out = tmp_path / "quickstart.log"
    with open(out, "w") as f:
        p = subprocess.Popen([str(SCRIPT), "--simulate"], cwd=tmp_path, env=env, stdout=f,
                             stderr=subprocess.STDOUT)
    try:
        assert "xferd_build_info" in wait_metrics(p, out, port)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    configure, build_call = calls[0].split(), calls[1].split()
    for arg in ("-GNinja", "-DCMAKE_UNITY_BUILD=ON", "-DCMAKE_BUILD_TYPE=Release",
                "-DXFERD_TESTS=OFF", "-DXFERD_BENCH=OFF", "-B", str(build)):
        assert arg in configure, (arg, configure)
    # No driver here: no CUDA to build (the simulated device needs none), and said.
    if not pathlib.Path("/proc/driver/nvidia/version").exists() and not shutil.which("nvidia-smi"):
        assert "-DXFERD_CUDA=OFF" in configure, configure
        assert "building xferd for the simulated device only" in out.read_text()
    assert build_call[:2] == ["--build", str(build)], build_call
    assert build_call[-2:] == ["--target", "xferd"], build_call
