#!/usr/bin/env python3
"""Writes the fake sysfs trees the tests run the simulated device on.

    tests/data/sysfs/generate.py [OUT_DIR]     (default: next to this script)

Each tree holds what xferd reads of a real /sys: bus/pci/devices/<bdf> links into
devices/pci<domain>:<bus>/<root port>/.../<bdf>, and in each function's directory vendor,
class, numa_node, the four link attributes and, where the function has AER, the kernel's
error counters as a current kernel writes them (aer_dev_correctable, aer_dev_nonfatal,
aer_dev_fatal: one line per error kind and a TOTAL_ERR_* line, all 0; on a root port also
aer_rootport_total_err_cor/_nonfatal/_fatal).

hgx-8gpu   an HGX-like 8-GPU node: 2 sockets (NUMA nodes 0 and 1), 4 PCIe switches (2 per
           socket), 2 GPUs behind each, every link Gen5 x16, so the 2 GPUs of a switch share
           its Gen5 x16 uplink. An NVMe drive and a NIC sit behind each switch too, and an
           NVSwitch (NVIDIA, but not a display function) on socket 0: none of them is a GPU.
igx-dgpu   an IGX-like board: one Gen5 x16 GPU behind a switch whose upstream link, like the
           SoC's root port, is Gen4 x8; the GPU's HDMI audio function (NVIDIA, class 0x0403)
           is not a GPU. One NUMA node (numa_node -1, as a single-node machine says).
vm-h200    a cloud VM: one Gen5 x16 GPU straight on the root bus (pci0000:00/0000:00:06.0),
           no bridge above it, numa_node -1, and no AER files (the hypervisor hides AER).

The committed trees are this script's output; run it again after changing it.
"""
import os
import shutil
import sys

GEN_SPEED = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}

NVIDIA, INTEL, BROADCOM, SAMSUNG, MELLANOX = "0x10de", "0x8086", "0x1000", "0x144d", "0x15b3"
BRIDGE, GPU_3D, AUDIO, NVME, INFINIBAND, OTHER_BRIDGE = (
    "0x060400", "0x030200", "0x040300", "0x010802", "0x020700", "0x068000")


# The error kinds a current kernel names in each AER file (drivers/pci/pcie/aer.c).
AER_CORRECTABLE = ["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                   "CorrIntErr", "HeaderOF"]
AER_UNCORRECTABLE = ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt",
                     "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol",
                     "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
                     "PoisonTLPBlocked"]
AER_FILES = (("aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR"),
             ("aer_dev_nonfatal", AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL"),
             ("aer_dev_fatal", AER_UNCORRECTABLE, "TOTAL_ERR_FATAL"))
AER_ROOTPORT_FILES = ("aer_rootport_total_err_cor", "aer_rootport_total_err_nonfatal",
                      "aer_rootport_total_err_fatal")


def write_aer(path, root_port):
    """The AER counters of a function with no error yet."""
    for name, kinds, total in AER_FILES:
        with open(os.path.join(path, name), "w") as f:
            f.write("".join(f"{kind} 0\n" for kind in kinds) + f"{total} 0\n")
    if root_port:
        for name in AER_ROOTPORT_FILES:
            with open(os.path.join(path, name), "w") as f:
                f.write("0\n")


class Tree:
    def __init__(self, root):
        self.root = root
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(os.path.join(root, "bus/pci/devices"))

    def add(self, parent, bdf, vendor, klass, numa, link, max_link=None, aer=True):
        """parent: the directory (relative to devices/) the function sits in; a bridge
        right under a host bridge (pci<domain>:<bus>) is a root port."""
        rel = os.path.join(parent, bdf)
        path = os.path.join(self.root, "devices", rel)
        os.makedirs(path)
        gen, width = link
        max_gen, max_width = max_link or link
        for name, value in (("vendor", vendor), ("class", klass), ("numa_node", str(numa)),
                            ("current_link_speed", GEN_SPEED[gen]),
                            ("current_link_width", str(width)),
                            ("max_link_speed", GEN_SPEED[max_gen]),
                            ("max_link_width", str(max_width))):
            with open(os.path.join(path, name), "w") as f:
                f.write(value + "\n")
        if aer:
            write_aer(path, root_port=klass == BRIDGE and os.sep not in parent)
        os.symlink(os.path.join("../../../devices", rel),
                   os.path.join(self.root, "bus/pci/devices", bdf))
        return rel


def hgx_8gpu(root):
    t = Tree(root)
    gen5x16 = (5, 16)
    # (root bus, NUMA node): two root complexes per socket, a switch on each.
    for root_bus, numa in ((0x15, 0), (0x37, 0), (0x97, 1), (0xb7, 1)):
        domain = f"pci0000:{root_bus:02x}"
        os.makedirs(os.path.join(root, "devices", domain))
        port = t.add(domain, f"0000:{root_bus:02x}:01.0", INTEL, BRIDGE, numa, gen5x16)
        upstream = t.add(port, f"0000:{root_bus + 1:02x}:00.0", BROADCOM, BRIDGE, numa, gen5x16)
        below = root_bus + 2
        for slot, (vendor, klass) in enumerate(((NVIDIA, GPU_3D), (NVIDIA, GPU_3D),
                                                (SAMSUNG, NVME), (MELLANOX, INFINIBAND))):
            downstream = t.add(upstream, f"0000:{below:02x}:{slot:02x}.0", BROADCOM, BRIDGE, numa,
                               gen5x16)
            t.add(downstream, f"0000:{below + 1 + slot:02x}:00.0", vendor, klass, numa,
                  gen5x16 if vendor == NVIDIA else (4, 4) if klass == NVME else (5, 16))
    os.makedirs(os.path.join(root, "devices/pci0000:00"))
    port = t.add("pci0000:00", "0000:00:01.0", INTEL, BRIDGE, 0, (4, 4))
    t.add(port, "0000:05:00.0", NVIDIA, OTHER_BRIDGE, 0, (4, 4))  # an NVSwitch: not a GPU


def igx_dgpu(root):
    t = Tree(root)
    os.makedirs(os.path.join(root, "devices/pci0005:00"))
    port = t.add("pci0005:00", "0005:00:00.0", NVIDIA, BRIDGE, -1, (4, 8))  # the SoC's port
    upstream = t.add(port, "0005:01:00.0", BROADCOM, BRIDGE, -1, (4, 8), (4, 8))
    downstream = t.add(upstream, "0005:02:00.0", BROADCOM, BRIDGE, -1, (5, 16))
    t.add(downstream, "0005:03:00.0", NVIDIA, GPU_3D, -1, (5, 16))
    t.add(downstream, "0005:03:00.1", NVIDIA, AUDIO, -1, (5, 16))


def vm_h200(root):
    t = Tree(root)
    os.makedirs(os.path.join(root, "devices/pci0000:00"))
    t.add("pci0000:00", "0000:00:06.0", NVIDIA, GPU_3D, -1, (5, 16), aer=False)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    hgx_8gpu(os.path.join(out, "hgx-8gpu"))
    igx_dgpu(os.path.join(out, "igx-dgpu"))
    vm_h200(os.path.join(out, "vm-h200"))


if __name__ == "__main__":
    main()
