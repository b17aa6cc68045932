"""A link that flaps between probes, caught by the link watch, end to end: the real daemon on
the simulated device over a copy of a fake sysfs tree whose current_link_width and
current_link_speed files the test rewrites while it runs (both ends of the link, as a real
link shows on both).

  - a steady tree, and a tree whose link drops its speed at idle (power saving: the files
    rewritten between probes, or [simulate] idle_link_gen) stay quiet: the watch's counters
    at 0, no link_flapping, every verdict ok;
  - a width that flips is caught with link_flapping on every surface (the counters, the
    cause in xferd_diagnosis, /api/v1/status and its incident log, `xferd health`), and
    clears once the watch's window lets it go;
  - a speed that flips while the GPU moves data (a steady simulated load that keeps every
    cycle busy, as a workload at 100 % would) is caught the same way; the same flips with no
    traffic are power saving.
"""
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from xferd_harness import BINARY, SOURCE_DIR

SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


def copy_tree(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(SOURCE_DIR / "tests" / "data" / "sysfs" / name, root, symlinks=True)
    return root


def link_dirs(root, gpu_bdf):
    """Both ends of the GPU's own link: the GPU and the port above it (if the tree has one)."""
    gpu = (root / "bus" / "pci" / "devices" / gpu_bdf).resolve()
    ends = [gpu]
    if (gpu.parent / "current_link_speed").exists():
        ends.append(gpu.parent)
    return ends


def set_link(dirs, gen=None, width=None):
    """Rewrites the files in place, as sysfs shows a link that retrained."""
    for d in dirs:
        if gen is not None:
            (d / "current_link_speed").write_text(SPEED[gen] + "\n")
        if width is not None:
            (d / "current_link_width").write_text(f"{width}\n")


class Flipper:
    """Flips a link between two states on a thread: `first` and `second` are (gen, width)."""

    def __init__(self, dirs, first, second, period=0.3):
        self.dirs, self.states, self.period = dirs, (first, second), period
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            gen, width = self.states[self.flips % 2]
            set_link(self.dirs, gen, width)
            self.flips += 1
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        set_link(self.dirs, *self.states[0])


def config(tree, interval="1s", window="8s", busy="", extra_simulate=""):
    return f"""
[probe]
interval = "{interval}"
jitter = 0
sizes = ["4MiB"]
iterations = 4
warmup = 1
max_duty_cycle = 1.0
[health]
consecutive_bad = 2
link_watch_interval = "200ms"
link_flap_window = "{window}"
link_flap_transitions = 4
{busy}
[simulate]
enabled = true
time_scale = 0.0
sysfs_root = "{tree}"
{extra_simulate}
"""


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def health(d):
    address = urlparse(d.url()).netloc
    r = subprocess.run([BINARY, "health", "--web.listen-address", address],
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.strip()


def causes(items):
    return {c["cause"] for c in items}


def watch_of(d, gpu=0):
    return status(d)["gpus"][gpu]["link"]["watch"]


def counters(d, gpu="0"):
    return (d.value("xferd_pcie_link_transitions_total", gpu=gpu),
            d.value("xferd_pcie_link_reduced_seconds_total", gpu=gpu))


def assert_quiet(d, gpus=1):
    for gpu in range(gpus):
        assert counters(d, str(gpu)) == (0, 0), (gpu, counters(d, str(gpu)))
        assert d.value("xferd_diagnosis", gpu=str(gpu), cause="link_flapping") == 0
    s = status(d)
    assert s["verdict"] == "ok", s["summary"]
    assert "link_flapping" not in s["summary"]
    rc, line = health(d)
    assert rc == 0, line


def test_a_steady_link_stays_quiet(daemon, tmp_path):
    tree = copy_tree(tmp_path, "hgx-8gpu")
    d = daemon(config(tree)).start().wait_ready()
    # Counters at 0 from the first reading on, for every GPU.
    d.wait_for(lambda: d.value("xferd_pcie_link_transitions_total", default=None, gpu="7")
               is not None, 20, "the link watch's counters")
    time.sleep(3)
    assert_quiet(d, gpus=8)
    watch = watch_of(d)
    assert watch["watching"] is True and watch["source"] == "simulated", watch
    assert "link watch: every 200 ms" in d.log()


def test_a_link_that_slows_down_at_idle_stays_quiet(daemon, tmp_path):
    # The tree's speed drops to Gen1 and back while nothing moves data: probes only in the
    # first cycle, the files rewritten after it (a fake tree cannot train up for a probe).
    tree = copy_tree(tmp_path, "vm-h200")
    d = daemon(config(tree, interval="1h")).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_pcie_link_transitions_total", default=None, gpu="0")
               is not None, 20, "the link watch's counters")
    with Flipper(link_dirs(tree, "0000:00:06.0"), (5, 16), (1, 16)) as f:
        time.sleep(4)
    assert f.flips >= 8
    assert counters(d) == (0, 0)
    assert d.value("xferd_diagnosis", gpu="0", cause="link_flapping") == 0
    assert health(d)[0] == 0

    # The simulated device's own power saving on the tree, probed every second: quiet too.
    tree2 = copy_tree(tmp_path / "b", "vm-h200")
    d2 = daemon(config(tree2, extra_simulate="idle_link_gen = 1")).start().wait_ready()
    d2.wait_for(lambda: d2.value("xferd_cycles_total", default=0, sum_all=True) >= 5, 30,
                "five cycles")
    assert_quiet(d2)


def test_a_width_that_flips_is_caught_everywhere_and_clears(daemon, tmp_path):
    # Compute keeps the GPUs busy (no PCIe traffic): every cycle is skipped as busy, so no
    # probe reads the fake tree's narrowed link (it cannot train up for one) and the verdict
    # is the watch's alone, every cycle.
    tree = copy_tree(tmp_path, "hgx-8gpu")
    d = daemon(config(tree, extra_simulate="gpu_utilization_percent = 90")).start().wait_ready()
    gpu0 = status(d)["gpus"][0]["pci_bus_id"]
    with Flipper(link_dirs(tree, gpu0), (5, 16), (5, 8)):
        d.wait_for(lambda: d.value("xferd_diagnosis", gpu="0", cause="link_flapping") == 1, 30,
                   "link_flapping in xferd_diagnosis")
    transitions, reduced = counters(d)
    assert transitions >= 4 and reduced > 0, (transitions, reduced)
    # The GPU beside it behind the same switch: its own link steady, nothing counted.
    assert counters(d, "1") == (0, 0)

    s = status(d)
    gpu = s["gpus"][0]
    assert s["verdict"] == "degraded" and gpu["verdict"] == "degraded", s["summary"]
    assert "link_flapping" in causes(gpu["causes"])
    assert gpu["link"]["watch"]["flapping"] is True
    assert gpu["link"]["watch"]["transitions_total"] >= 4
    assert "x8" in gpu["link"]["watch"]["last_seen"], gpu["link"]["watch"]
    assert "DEGRADED gpu0 PCIe link; likely: link_flapping (" in s["summary"], s["summary"]
    incident = [i for i in s["incidents"] if i["gpu"] == 0][0]  # newest first
    assert incident["to"] == "degraded" and "link_flapping" in causes(incident["causes"])
    rc, line = health(d)
    assert rc == 1 and line.startswith("DEGRADED XFERD-103/inspect_link gpu0") and "link_flapping" in line, line
    assert "PCIe link flapping" in d.log()

    # Steady again, and the compute gone: a GPU skipped as busy every cycle has no current
    # reading (its verdict would be stale, not ok), so the reload lets the probes run. Once
    # the window (8 s) lets the transitions go, ok on every surface.
    d.write_config(config(tree))
    d.signal(signal.SIGHUP)
    d.wait_for(lambda: status(d)["verdict"] == "ok", 30, "the verdict back to ok")
    assert d.value("xferd_diagnosis", gpu="0", cause="link_flapping") == 0
    assert health(d)[0] == 0
    assert status(d)["incidents"][0]["to"] == "ok"
    assert "PCIe link steady again" in d.log()


def test_a_speed_that_flips_while_data_moves_is_caught(daemon, tmp_path):
    # A workload keeps the GPU's link busy (4 GB/s, over [busy] pcie_bytes_per_second: every
    # cycle is skipped as busy, no probe ever sees the link) while its speed flips.
    tree = copy_tree(tmp_path, "vm-h200")
    d = daemon(config(tree, extra_simulate="pcie_bytes_per_second = 4e9")).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_pcie_link_transitions_total", default=None, gpu="0")
               is not None, 20, "the link watch's counters")
    with Flipper(link_dirs(tree, "0000:00:06.0"), (5, 16), (2, 16), period=0.4):
        d.wait_for(lambda: d.value("xferd_diagnosis", gpu="0", cause="link_flapping") == 1, 30,
                   "link_flapping in xferd_diagnosis")
    assert counters(d)[0] >= 4
    s = status(d)
    gpu = s["gpus"][0]
    assert gpu["verdict"] == "degraded", s["summary"]
    assert {"link_flapping", "gpu_busy"} <= causes(gpu["causes"]), gpu["causes"]
    assert "while moving data" in gpu["link"]["watch"]["last_seen"] or \
        "Gen2 x16 -> Gen5 x16" in gpu["link"]["watch"]["last_seen"] or \
        "Gen5 x16 -> Gen2 x16" in gpu["link"]["watch"]["last_seen"], gpu["link"]["watch"]
    rc, line = health(d)
    assert rc == 1 and "link_flapping" in line, line
