#!/usr/bin/env python3
"""Checks that each folder includes only the layers below it (docs/architecture.md).

    tests/check_layers.py [SOURCE_DIR]

Reads every C++/CUDA source and header of the library folders and fails, naming the file,
the line and the layer, on an #include of a layer the folder may not use. An include is
placed by the path it is spelled with ("core/band.h", "xferd/probes/types.h",
"probes/sim/sim_topology.h"); one that names a file next to the including file
("resources.h", "../exporter/metrics.h") is placed by the file it reaches, and is itself a
problem: every include is spelled from its include root, one way. ctest runs it
(layers.includes); it needs no build.
"""
import re
import sys
from pathlib import Path

# Which layers each folder may include (its own always).
ALLOWED = {
    "platform": set(),
    "probes": {"platform"},
    "core": {"probes", "platform"},
    "web": {"platform"},
    "config": {"core", "web", "probes", "platform"},
    "exporter": {"core", "web", "probes", "platform"},
    "cmd": {"config", "exporter", "core", "web", "probes", "platform"},
    "testing": {"core", "probes", "platform", "web"},
}
# Where each layer's folder is, from the source root.
FOLDER = {
    "platform": "platform",
    "probes": "probes",
    "core": "daemon/core",
    "web": "daemon/web",
    "config": "daemon/config",
    "exporter": "daemon/exporter",
    "cmd": "daemon/cmd",
    "testing": "tests/testing",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(include):
    first = include.split("/")[0]
    if include.startswith("xferd/probes/"):
        return "probes"
    if include.startswith("probes/"):
        return "probes"
    return first if first in ALLOWED else None


def layer_of_file(root, path):
    """The layer whose folder holds `path`; None outside every layer."""
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else None
    if rel is None:
        return None
    for layer, folder in FOLDER.items():
        if rel.startswith(folder + "/"):
            return layer
    return None


def root_spelling(root, path):
    """How `path` is spelled from its include root: daemon/ for the daemon's layers,
    probes/include for the probes library's public headers, else the source root."""
    rel = path.relative_to(root).as_posix()
    for prefix in ("daemon/", "probes/include/", "tests/"):
        if rel.startswith(prefix):
            return rel[len(prefix):]
    return rel


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    root = root.resolve()
    problems, files = [], 0
    for folder, allowed in ALLOWED.items():
        for path in sorted((root / FOLDER[folder]).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".in"):
                continue
            files += 1
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                include = m.group(1)
                where = f"{path.relative_to(root)}:{number}: includes {include}"
                beside = (path.parent / include).resolve()
                if beside.is_file():
                    # Spelled relative to the including file: placed by what it reaches.
                    used = layer_of_file(root, beside)
                    spelled = (f'"{root_spelling(root, beside)}"' if beside.is_relative_to(root)
                               else "from its include root")
                    problems.append(f"{where}: relative to its own folder; spell it {spelled}")
                else:
                    used = layer_of(include)
                if used is not None and used != folder and used not in allowed:
                    problems.append(f"{where}: {folder}/ may use only "
                                    f"{', '.join(sorted(allowed)) or 'itself'}")
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} include(s) against the layering")
    return 1 if problems or files == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
