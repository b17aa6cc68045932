#!/usr/bin/env bash
# xferd_gpu_info on a real GPU against what nvidia-smi and the driver say, the values
# dcgm-exporter writes (docs/metrics.md, "Joins with dcgm-exporter"): UUID, pci_bus_id in
# NVML's form (nvidia-smi's pci.bus_id: "00000000:3B:00.0"), device = nvidia<Device Minor of
# /proc/driver/nvidia/gpus/<bus id>/information>, modelName = nvidia-smi's name; and the
# fleet profile's series per GPU with the shipped probe plan.
#
#   bench/gpu/gpu_info_check.sh OUT_DIR      (from the repository root; about 40 s)
#
# Runs the bundle made on the build machine (XFERD_BUNDLE, default .devbundle). Writes
# gpu_info.prom, nvidia_smi.csv, gpu_info_check.txt (one PASS/FAIL line per GPU and label,
# and the fleet profile's count) and the daemon logs to OUT_DIR; exits 1 when a check fails.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: gpu_info_check.sh OUT_DIR}
use_bundle "$out"
daemon_workspace 19743

nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader > "$out/nvidia_smi.csv"
for profile in full fleet; do
  xferd_toml "$port" "$work/state-$profile" > "$work/$profile.toml" <<TOML
[probe]
interval = "5s"
max_duty_cycle = 1.0
[metrics]
profile = "$profile"
TOML
  NODE_NAME=gpu-info-check "$b/xferd" run --config "$work/$profile.toml" > "$out/daemon_$profile.log" 2>&1 &
  pid=$!
  sleep 15
  http_get "http://127.0.0.1:$port/metrics" > "$out/metrics_$profile.prom"
  kill -TERM "$pid"; wait "$pid"; pid=""
done
grep '^xferd_gpu_info' "$out/metrics_full.prom" > "$out/gpu_info.prom"

python3 - "$out" <<'PY'
import csv, re, sys
from pathlib import Path
out = Path(sys.argv[1])
labels = lambda s: dict(re.findall(r'(\w+)="([^"]*)"', s))
infos = [labels(l) for l in (out / "gpu_info.prom").read_text().splitlines()]
smi = {row[1].strip(): [c.strip() for c in row] for row in csv.reader(open(out / "nvidia_smi.csv"))}
lines, ok = [], True
def check(what, good):
    global ok
    ok = ok and good
    lines.append(f"{'PASS' if good else 'FAIL'} {what}")
check(f"xferd_gpu_info has a series per GPU nvidia-smi lists ({len(infos)} of {len(smi)})",
      len(infos) == len(smi) and len(smi) > 0)
for info in infos:
    index, uuid, bus, name = smi.get(info.get("UUID"), ["?"] * 4)
    check(f"gpu {info.get('gpu')} UUID {info.get('UUID')} is nvidia-smi's", uuid == info.get("UUID"))
    check(f"gpu {info.get('gpu')} pci_bus_id {info.get('pci_bus_id')} == nvidia-smi's {bus}",
          bus == info.get("pci_bus_id"))
    check(f"gpu {info.get('gpu')} modelName {info.get('modelName')!r} == nvidia-smi's {name!r}",
          name == info.get("modelName"))
    proc = Path("/proc/driver/nvidia/gpus") / bus[4:].lower() / "information"
    m = re.search(r"Device Minor:\s*(\d+)", proc.read_text()) if proc.exists() else None
    want = f"nvidia{m.group(1)}" if m else "(no /proc/driver/nvidia)"
    check(f"gpu {info.get('gpu')} device {info.get('device')} == {want}", want == info.get("device"))
    check(f"gpu {info.get('gpu')} Hostname and hostname from NODE_NAME",
          info.get("Hostname") == info.get("hostname") == "gpu-info-check")
fleet = [l for l in (out / "metrics_fleet.prom").read_text().splitlines() if l and l[0] != "#"]
for info in infos:
    n = sum(1 for l in fleet if f'gpu="{info["gpu"]}"' in l)
    check(f"gpu {info['gpu']}: {n} series in the fleet profile (at most 60)", n <= 60)
text = "\n".join(lines) + "\n"
(out / "gpu_info_check.txt").write_text(text)
sys.stdout.write(text)
sys.exit(0 if ok else 1)
PY
