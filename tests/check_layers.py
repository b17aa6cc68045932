#!/usr/bin/env python3
"""Checks that each folder includes only the layers below it (docs/architecture.md).

    tests/check_layers.py [SOURCE_DIR]

Reads every C++/CUDA source and header of the library folders and fails, naming the file,
the line and the layer, on an #include of a layer the folder may not use. ctest runs it
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
    "testing": {"core", "probes", "platform"},
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
    return first if first in ALLOWED else None


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
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
                used = layer_of(m.group(1))
                if used is not None and used != folder and used not in allowed:
                    problems.append(f"{path.relative_to(root)}:{number}: includes {m.group(1)}: "
                                    f"{folder}/ may use only {', '.join(sorted(allowed)) or 'itself'}")
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} include(s) against the layering")
    return 1 if problems or files == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
