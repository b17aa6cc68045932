"""The link's error counters end to end, on the real binary and the simulated device: AER
and replay counters growing under a `link_errors` fault, missing on a VM's tree, hostile
files in a tree swapped under a running daemon; the `link_errors` cause named under a fault
that costs bandwidth, and never on a healthy path or one whose bandwidth still reads well.

  hgx-8gpu  every device of every path has AER files (all 0); GPU 0's path is the GPU
            0000:18:00.0, its switch's ports 0000:17:00.0 and 0000:16:00.0, the root port
            0000:15:01.0
  igx-dgpu  one GPU, 0005:03:00.0, below a switch (0005:02:00.0, 0005:01:00.0) and the
            SoC's root port 0005:00:00.0; its Gen4 x8 uplink makes the band 9.9-13.1 GB/s
  vm-h200   a GPU on a VM's root bus without AER files, as the H200 test machine
"""
import json
import os
import shutil
import subprocess

import pytest

from xferd_harness import BINARY, SOURCE_DIR, sim_config

TREES = SOURCE_DIR / "tests" / "data" / "sysfs"
GPU, DOWN, UP, ROOT = "0000:18:00.0", "0000:17:00.0", "0000:16:00.0", "0000:15:01.0"
IGX_GPU, IGX_DOWN, IGX_UP, IGX_ROOT = "0005:03:00.0", "0005:02:00.0", "0005:01:00.0", "0005:00:00.0"
# Probes held to the band (64 MiB; 1 MiB is judged against its baseline only).
BAND_SIZED = {"sizes": ('"64MiB"',), "iterations": 4}


def tree_config(tree, faults=(), **kw):
    return sim_config(faults=faults, **kw).replace(
        "[simulate]\n", f'[simulate]\nsysfs_root = "{tree}"\n', 1)


def aer(d, device, cls, gpu="0"):
    return d.value("xferd_pcie_aer_errors_total", default=-1, gpu=gpu, device=device, **{"class": cls})


def readable(d, device, source="aer", gpu="0"):
    return d.value("xferd_pcie_error_source_readable", default=-1, gpu=gpu, device=device,
                   source=source)


def diagnosis(d, cause="link_errors"):
    return d.value("xferd_diagnosis", gpu="0", cause=cause)


def copy_tree(tmp_path, name="igx-dgpu"):
    out = tmp_path / name
    shutil.copytree(TREES / name, out, symlinks=True)
    return out


def aer_file(tree, bdf, name="aer_dev_correctable"):
    return tree / "bus" / "pci" / "devices" / bdf / name


def test_a_healthy_path_reads_every_source_and_names_no_cause(daemon):
    d = daemon(tree_config(TREES / "hgx-8gpu")).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= 4, 30, "4 cycles")
    for device in (GPU, DOWN, UP, ROOT):
        assert readable(d, device) == 1, device
        for cls in ("correctable", "nonfatal", "fatal"):
            assert aer(d, device, cls) == 0, (device, cls)
    assert d.value("xferd_pcie_aer_rootport_errors_total", gpu="0", device=ROOT,
                   **{"class": "fatal"}) == 0
    assert d.value("xferd_pcie_replays_total", gpu="0") == 0
    assert readable(d, GPU, "nvml_replay") == 1
    assert diagnosis(d) == 0
    # What the host lets xferd read, said once per GPU.
    assert "link errors: GPU 0 reads PCIe replays 0" in d.log()
    assert "not readable" not in d.log()


def test_errors_that_cost_bandwidth_name_the_cause(daemon):
    # Correctable errors at the switch's upstream port, 200 a second, and the bandwidth they
    # cost: the GPU reads below its band while the counter climbs.
    fault = {"kind": "link_errors", "counter": "correctable", "rate": 200, "hop": 2,
             "factor": 0.5}
    d = daemon(tree_config(TREES / "igx-dgpu", faults=[fault], **BAND_SIZED)).start().wait_ready()
    d.wait_for(lambda: diagnosis(d) == 1, 30, "the link_errors cause")
    grown = aer(d, IGX_UP, "correctable")
    assert grown > 0
    d.wait_for(lambda: aer(d, IGX_UP, "correctable") > grown, 10, "the counter to keep growing")
    # The root port counts the messages it received; the GPU's own end counts nothing.
    assert d.value("xferd_pcie_aer_rootport_errors_total", gpu="0", device=IGX_ROOT,
                   **{"class": "correctable"}) >= grown
    assert aer(d, IGX_GPU, "correctable") == 0
    d.wait_log(r"likely link_errors \(\+\d+ correctable AER errors, most at 0005:01:00.0 "
               r"\(a switch port: RxErr \+\d+\)")
    assert "upstream of the GPU" in d.log()


def test_a_fault_on_one_gpu_leaves_the_others_paths_alone(daemon):
    fault = {"kind": "link_errors", "device": 0, "counter": "fatal", "rate": 1, "hop": -1}
    d = daemon(tree_config(TREES / "hgx-8gpu", faults=[fault])).start().wait_ready()
    d.wait_for(lambda: aer(d, ROOT, "fatal") >= 1, 30, "a fatal error at GPU 0's root port")
    assert aer(d, "0000:19:00.0", "fatal", gpu="1") == 0
    assert aer(d, ROOT, "fatal", gpu="1") == 0


def test_replays_on_a_link_that_still_reads_well_name_no_cause(daemon):
    # The alert's case (XferdPcieLinkErrorsRising), not a cause: bandwidth is unchanged.
    fault = {"kind": "link_errors", "counter": "replay", "rate": 500}
    d = daemon(sim_config(faults=[fault])).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_pcie_replays_total", gpu="0") > 100, 20, "replays")
    n = d.value("xferd_cycles_total", sum_all=True)
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= n + 3, 20, "3 more cycles")
    assert diagnosis(d) == 0
    assert d.value("xferd_bandwidth_degraded", gpu="0", mode="pinned", direction="h2d") == 0


def test_a_vm_without_aer_is_not_readable_never_zero(daemon):
    d = daemon(tree_config(TREES / "vm-h200")).start().wait_ready()
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= 3, 30, "3 cycles")
    m = d.metrics()
    assert not [k for k in m if k[0] == "xferd_pcie_aer_errors_total"], "no AER: no zeros"
    assert readable(d, "0000:00:06.0") == 0
    assert readable(d, "0000:00:06.0", "nvml_replay") == 1
    assert diagnosis(d) == 0
    said = [l for l in d.log().splitlines() if "no AER counters in sysfs" in l]
    assert len(said) == 2, said  # the first reading's summary and the note, not every cycle
    assert "which is no fault" in d.log()


HOSTILE = {
    "garbage": lambda f: f.write_text("RxErr lots\nTOTAL_ERR_COR x\n"),
    "huge": lambda f: f.write_text("RxErr 0\n" * 100000 + "TOTAL_ERR_COR 0\n"),
    "fifo": lambda f: os.mkfifo(f),
    "directory": lambda f: f.mkdir(),
    "another class": lambda f: f.write_text("TOTAL_ERR_FATAL 3\n"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_files_are_not_readable_and_said_once(daemon, tmp_path, kind):
    tree = copy_tree(tmp_path)
    d = daemon(tree_config(tree)).start().wait_ready()
    d.wait_for(lambda: readable(d, IGX_GPU) == 1, 20, "the GPU's AER readable")
    f = aer_file(tree, IGX_GPU)
    f.unlink()
    HOSTILE[kind](f)
    d.wait_for(lambda: readable(d, IGX_GPU) == 0, 20, "the GPU's AER not readable")
    n = d.value("xferd_cycles_total", sum_all=True)
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= n + 5, 30, "5 more cycles")
    assert d.alive() and d.get("/healthz")[0] == 200
    assert aer(d, IGX_GPU, "correctable") == -1, "not readable: no series, not a zero"
    assert aer(d, IGX_GPU, "fatal") == 0  # the files that read still count
    said = [l for l in d.log().splitlines() if "AER counters not readable" in l]
    assert len(said) == 1, said
    assert "aer_dev_correctable" in said[0]
    # Put right, it reads again, and the log says so.
    if f.is_dir():
        f.rmdir()
    else:
        f.unlink()
    f.write_text("RxErr 0\nTOTAL_ERR_COR 0\n")
    d.wait_for(lambda: readable(d, IGX_GPU) == 1, 20, "the GPU's AER readable again")
    d.wait_log("AER counters readable again")


def test_a_count_that_goes_back_is_no_count(daemon, tmp_path):
    tree = copy_tree(tmp_path)
    d = daemon(tree_config(tree)).start().wait_ready()
    f = aer_file(tree, IGX_DOWN)
    f.write_text("RxErr 100\nTOTAL_ERR_COR 100\n")
    d.wait_for(lambda: aer(d, IGX_DOWN, "correctable") == 100, 20, "100 errors")
    f.write_text("RxErr 5\nTOTAL_ERR_COR 5\n")
    d.wait_for(lambda: readable(d, IGX_DOWN) == 0, 20, "the count going back to be caught")
    d.wait_log(r"TOTAL_ERR correctable went back from 100 to 5")
    # The series restarts at what the kernel says (rate() sees a reset, not -95).
    assert aer(d, IGX_DOWN, "correctable") == 5
    d.wait_for(lambda: readable(d, IGX_DOWN) == 1, 20, "readable again once it holds")
    assert diagnosis(d) == 0


def probe_json(*args):
    out = subprocess.run([BINARY, "probe", "--simulate", "--json", "--iterations", "5", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout), out


def test_probe_shows_every_source_as_read():
    doc, _ = probe_json("--sysfs-root", str(TREES / "hgx-8gpu"), "--gpu", "0", "--mode", "pinned")
    errors = doc["devices"][0]["link_errors"]
    assert [a["device"] for a in errors["aer"]] == [GPU, DOWN, UP, ROOT]
    assert all(a["readable"] for a in errors["aer"])
    assert errors["aer"][0]["counts"] == {"correctable": 0, "nonfatal": 0, "fatal": 0}
    assert errors["aer"][-1]["root_port"] and errors["aer"][-1]["rootport_counts"]["fatal"] == 0
    assert errors["replays"] == {"readable": True, "value": 0, "problem": "", "grew": 0}
    # A VM: not readable, with the reason, never 0.
    doc, out = probe_json("--sysfs-root", str(TREES / "vm-h200"), "--mode", "pinned")
    vm = doc["devices"][0]["link_errors"]["aer"]
    assert len(vm) == 1 and not vm[0]["readable"]
    assert vm[0]["counts"] == {"correctable": None, "nonfatal": None, "fatal": None}
    assert "no AER counters" in vm[0]["problem"]
    table = subprocess.run([BINARY, "probe", "--simulate", "--sysfs-root", str(TREES / "vm-h200"),
                            "--mode", "pinned", "--iterations", "3"],
                           capture_output=True, text=True, timeout=120)
    assert "link errors: PCIe replays 0 (NVML); 0000:00:06.0 (the GPU) AER not readable" in \
        table.stdout, table.stdout


def test_probe_names_the_cause_under_a_fault(tmp_path):
    config = tmp_path / "xferd.toml"
    config.write_text(
        "[simulate]\nenabled = true\ntime_scale = 0\n"
        "[[simulate.fault]]\nkind = \"link_errors\"\ncounter = \"replay\"\nrate = 1000\n"
        "factor = 0.5\n")
    doc, out = probe_json("--config", str(config), "--mode", "pinned")
    assert out.returncode == 1
    causes = {c["cause"]: c for c in doc["devices"][0]["diagnoses"]}
    assert "link_errors" in causes, causes
    assert "PCIe replays (NVML)" in causes["link_errors"]["detail"]
    errors = doc["devices"][0]["link_errors"]
    assert errors["replays"]["grew"] > 8 and errors["significant"]
