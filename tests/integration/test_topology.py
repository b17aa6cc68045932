"""Downtrained or only capped, end to end: the real binary on a simulated GPU taken from a
fake sysfs tree (`--sysfs-root`, `[simulate] sysfs_root`), through the topology reader, the
band, the verdict, the diagnosis and the metrics of `xferd probe` and `xferd run`.

  gen5-in-gen4  a Gen5 x16 GPU in a Gen4 x16 slot: capped, not downtrained
  x8-switch     a Gen5 x16 root port linked to an x8 switch, a Gen5 x16 GPU below it: the
                switch caps the path, nothing is downtrained
  downtrained   a GPU and its root port both Gen5 x16 capable, trained at x8: a fault, held
                to the Gen5 x16 band it does not reach
"""
import importlib.util
import json
import subprocess

import pytest

from xferd_harness import BINARY, SOURCE_DIR

GEN4X16 = 31.508e9
GEN5X8 = 31.508e9
GEN5X16 = 63.015e9


def tree_maker():
    spec = importlib.util.spec_from_file_location(
        "sysfs_trees", SOURCE_DIR / "tests" / "data" / "sysfs" / "generate.py")
    trees = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trees)
    return trees


def make_tree(root, case):
    t = tree_maker()
    tree = t.Tree(str(root))
    (root / "devices" / "pci0000:00").mkdir(parents=True)
    if case == "gen5-in-gen4":
        port = tree.add("pci0000:00", "0000:00:01.0", t.INTEL, t.BRIDGE, 0, (4, 16))
        tree.add(port, "0000:01:00.0", t.NVIDIA, t.GPU_3D, 0, (4, 16), (5, 16))
    elif case == "x8-switch":
        port = tree.add("pci0000:00", "0000:00:01.0", t.INTEL, t.BRIDGE, 0, (5, 8), (5, 16))
        upstream = tree.add(port, "0000:01:00.0", t.BROADCOM, t.BRIDGE, 0, (5, 8), (5, 8))
        downstream = tree.add(upstream, "0000:02:00.0", t.BROADCOM, t.BRIDGE, 0, (5, 16))
        tree.add(downstream, "0000:03:00.0", t.NVIDIA, t.GPU_3D, 0, (5, 16))
    else:
        port = tree.add("pci0000:00", "0000:00:01.0", t.INTEL, t.BRIDGE, 0, (5, 8), (5, 16))
        tree.add(port, "0000:01:00.0", t.NVIDIA, t.GPU_3D, 0, (5, 8), (5, 16))
    return root


def causes(device):
    return {d["cause"]: d for d in device["diagnoses"]}


@pytest.mark.parametrize("case", ["gen5-in-gen4", "x8-switch", "downtrained"])
def test_probe_tells_a_downtrained_link_from_a_capped_one(tmp_path, case):
    tree = make_tree(tmp_path / "sys", case)
    args = [BINARY, "probe", "--simulate", "--sysfs-root", str(tree), "--mode", "pinned",
            "--iterations", "3"]
    out = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    device = json.loads(out.stdout)["devices"][0]
    found = causes(device)
    own = device["link_path"]["links"][0]
    table = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    if case == "downtrained":
        assert "link_downtrained" in found, found
        assert found["link_downtrained"]["detail"] == "0000:01:00.0 Gen5 x8, max Gen5 x16"
        assert "capability_mismatch" not in found
        assert own["downtrained"] and not own["capped_by_other_end"]
        assert "check the slot, riser and seating" in table
    else:
        assert "link_downtrained" not in found, found["link_downtrained"]
        assert "capability_mismatch" in found, found
        assert "Not a fault" in found["capability_mismatch"]["advice"]
        assert not own["downtrained"]
        assert "check the slot, riser and seating" not in table
    if case == "gen5-in-gen4":
        assert found["capability_mismatch"]["detail"] == \
            "GPU can do Gen5 x16, its path at most Gen4 x16 (link 0000:01:00.0 - 0000:00:01.0)"
        assert own["capped_by_other_end"] and own["link_max_gen"] == 4
        assert "(the GPU can do Gen5 x16)" in table
    if case == "x8-switch":
        assert found["capability_mismatch"]["detail"] == \
            "GPU can do Gen5 x16, its path at most Gen5 x8 (link 0000:01:00.0 - 0000:00:01.0)"
    # The band follows what the narrowest link can carry, the lower of its two ends' maxima:
    # the slot's Gen4 x16 for the capped GPU, the switch's x8, and the downtrained link's
    # Gen5 x16, which it does not reach.
    expected = {"gen5-in-gen4": GEN4X16, "x8-switch": GEN5X8, "downtrained": GEN5X16}[case]
    assert device["expected_band"]["lower_bytes_per_s"] == pytest.approx(0.63 * expected, rel=1e-3)
    # A GPU that is only capped reads within its band: nothing fails. A downtrained one reads
    # below it, and `xferd probe` says so in its exit status.
    if case != "downtrained":
        assert out.returncode == 0, table
    else:
        assert out.returncode == 1, table
        assert "below band" in table, table
        assert "link Gen5 x16 at 0000:01:00.0, trained Gen5 x8" in device["expected_band"]["source"]


@pytest.mark.parametrize("case", ["gen5-in-gen4", "downtrained"])
def test_run_exports_the_cause_and_the_links_maximum(daemon, tmp_path, case):
    tree = make_tree(tmp_path / "sys", case)
    d = daemon(f"""
[probe]
interval = "300ms"
jitter = 0
modes = ["pinned"]
sizes = ["16MiB"]
iterations = 3
warmup = 0
max_duty_cycle = 1.0

[simulate]
enabled = true
time_scale = 0
sysfs_root = "{tree}"
""").start().wait_ready()
    capped = case == "gen5-in-gen4"
    assert d.value("xferd_diagnosis", gpu="0", cause="capability_mismatch") == (1 if capped else 0)
    assert d.value("xferd_diagnosis", gpu="0", cause="link_downtrained") == (0 if capped else 1)
    # state="max" is the most the link can train to: the rules' current < max is the fault.
    gen_max = d.value("xferd_pcie_link_generation", gpu="0", state="max")
    gen_now = d.value("xferd_pcie_link_generation", gpu="0", state="current")
    width_max = d.value("xferd_pcie_link_width", gpu="0", state="max")
    width_now = d.value("xferd_pcie_link_width", gpu="0", state="current")
    assert (gen_now < gen_max or width_now < width_max) == (not capped)
    if capped:
        assert (gen_max, gen_now) == (4, 4)
        assert "verdict DEGRADED" not in d.log()
        assert d.value("xferd_bandwidth_degraded", gpu="0") == 0
    else:
        # Trained down from the start: below the band the link can carry, so DEGRADED.
        d.wait_for(lambda: d.value("xferd_bandwidth_degraded", gpu="0", default=0) == 1, 30,
                   "the downtrained GPU to turn DEGRADED")
        d.wait_log(r"verdict DEGRADED")
