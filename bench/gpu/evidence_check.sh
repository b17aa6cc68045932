#!/usr/bin/env bash
# An evidence record on a real GPU (docs/health.md, "Evidence records"): a configured band
# no PCIe link reaches (500-600 GB/s for GPU 0) turns GPU 0 DEGRADED within a few cycles
# without touching the hardware; the record must then hold lspci -vvv of each device of
# the path (where lspci is installed), each hop's link from sysfs, the driver's version,
# the readings that flipped it, and stay within its bounds; `xferd evidence` prints it.
#
#   bench/gpu/evidence_check.sh OUT_DIR      (from the repository root; about 40 s)
#
# Runs the bundle made on the build machine (XFERD_BUNDLE, default .devbundle). Writes to
# OUT_DIR: machine.txt (lspci's path and version, the user, the GPU's bus id),
# lspci_direct.txt (lspci -vvv of the GPU as this user, to compare), daemon.log,
# status.json, the record(s) (evidence/*.json), evidence.txt (`xferd evidence 0`),
# evidence_list.txt, evidence_check.txt (one PASS/FAIL/INFO line per check); exits 1 when a
# check fails.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: evidence_check.sh OUT_DIR}
use_bundle "$out"
daemon_workspace 19744

bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | tr 'A-F' 'a-f' | sed 's/^0000//')
{
  echo "user: $(id -u) ($(id -un))"
  echo "gpu0 bus id: $bus"
  echo "lspci: $(command -v lspci || echo 'not installed')"
  lspci --version 2>&1 || true
  echo "driver: $(cat /sys/module/nvidia/version 2>/dev/null || echo '?')"
} > "$out/machine.txt"
lspci -vvv -s "$bus" > "$out/lspci_direct.txt" 2>&1 || true

xferd_toml "$port" "$work/state" > "$work/xferd.toml" <<TOML
[probe]
gpus = ["0"]
interval = "5s"
modes = ["pinned"]
sizes = ["64MiB"]
max_duty_cycle = 1.0
[health]
consecutive_bad = 2
[[health.band]]
gpu = "0"
lower = "500GB/s"
upper = "600GB/s"
TOML
"$b/xferd" check-config "$work/xferd.toml" > "$out/check_config.txt" 2>&1
"$b/xferd" run --config "$work/xferd.toml" > "$out/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 60); do
  "$b/xferd" evidence 0 --state-dir "$work/state" > /dev/null 2>&1 && break
  sleep 1
done
sleep 2
http_get "http://127.0.0.1:$port/api/v1/status" > "$out/status.json"
"$b/xferd" health --url "http://127.0.0.1:$port" > "$out/health.txt" 2>&1
kill -TERM "$pid"; wait "$pid"; pid=""
"$b/xferd" evidence --state-dir "$work/state" > "$out/evidence_list.txt" 2>&1
"$b/xferd" evidence 0 --state-dir "$work/state" > "$out/evidence.txt" 2>&1
mkdir -p "$out/evidence"
cp "$work"/state/evidence/*.json "$out/evidence/" 2>/dev/null

python3 - "$out" <<'PY'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
lines, ok = [], True
def check(what, good, info=False):
    global ok
    ok = ok and (good or info)
    lines.append(f"{'INFO' if info else 'PASS' if good else 'FAIL'} {what}")
records = sorted((out / "evidence").glob("*.json"))
check(f"an evidence record was kept ({len(records)})", len(records) >= 1)
health = (out / "health.txt").read_text()
check(f"xferd health: {health.strip()[:100]}", health.startswith("DEGRADED XFERD-301/diagnose gpu0 pinned"))
if records:
    path = records[-1]
    r = json.loads(path.read_text())
    check(f"{path.name}: {path.stat().st_size} bytes, within 262144", path.stat().st_size <= 262144)
    check(f"verdict {r['verdict']['code']}/{r['verdict']['action']} {r['verdict']['cause']}",
          r["verdict"]["code"] == "XFERD-301")
    check(f"driver {r['gpu']['driver_version']}, module {r['host'].get('nvidia_module_version')}",
          r["gpu"]["driver_version"] not in ("", "sim") and bool(r["host"].get("nvidia_module_version")))
    hops = r["link"]["hops"]
    check(f"{len(hops)} hops, the GPU's own {hops[0]['current'] if hops else None} "
          f"(link max {hops[0]['link_max'] if hops else None})",
          bool(hops) and hops[0]["current"]["width"] is not None)
    streak = [x for s in r["streak"] for x in s["readings"] if x["in_streak"]]
    check(f"{len(streak)} readings in the streak that flipped it", len(streak) >= 2)
    check(f"link errors during: {'read' if r['link_errors'] else 'not read'}", bool(r["link_errors"]), info=True)
    check(f"NUMA: GPU {r['placement']['gpu_numa_node']}, buffers {r['placement']['host_buffer_numa_node']}; "
          f"IOMMU {r['link']['iommu_type']}, cmdline {r['host']['iommu_cmdline']}", True, info=True)
    lspci = r["lspci"]
    installed = "not installed" not in (out / "machine.txt").read_text()
    if not installed:
        check(f"lspci not installed: said so ({lspci['reason']})", not lspci["run"] and "not installed" in lspci["reason"])
    else:
        devices = lspci["devices"]
        check(f"lspci ran on {len(devices)} devices of the path: "
              + ", ".join(f"{d['bdf']} exit {d.get('exit_code')} {d.get('seconds', 0):.2f} s "
                          f"{len(d.get('output', ''))} bytes" for d in devices),
              lspci["run"] and devices and all(d.get("exit_code") == 0 for d in devices))
        text = devices[0].get("output", "") if devices else ""
        check("the GPU's lspci shows LnkCap/LnkSta" if "LnkSta" in text else
              "the GPU's lspci lacks LnkSta (capabilities need root: " +
              ("access denied" if "access denied" in text else "?") + ")", True, info=True)
        check("each device's text within 16 KiB",
              all(len(d.get("output", "")) <= 16 * 1024 for d in devices))
status = json.loads((out / "status.json").read_text())
g = status["gpus"][0]
check(f"status API links it: {g.get('evidence')}", bool(g.get("evidence")))
check(f"the incident links it: {status['incidents'][0].get('evidence') if status['incidents'] else None}",
      bool(status["incidents"]) and bool(status["incidents"][0].get("evidence")))
log = (out / "daemon.log").read_text()
m = re.search(r"evidence: gpu 0: kept .*", log)
check(f"log: {m.group(0)[:160] if m else 'no evidence line'}", bool(m))
text = (out / "evidence.txt").read_text()
check("xferd evidence 0 prints it", "verdict: XFERD-301/diagnose" in text and "path (GPU first)" in text)
report = "\n".join(lines) + "\n"
(out / "evidence_check.txt").write_text(report)
sys.stdout.write(report)
sys.exit(0 if ok else 1)
PY
