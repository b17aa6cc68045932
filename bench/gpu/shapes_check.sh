#!/usr/bin/env bash
# Confidential computing and MIG as xferd reads them through NVML on a real GPU, beside what
# nvidia-smi says: `xferd probe` (text and --json), `xferd check-config`, and the status API
# of a short `xferd run`. PASS when every surface shows a state read (not "unknown") that
# agrees with nvidia-smi's (on the H200 test machine: CC off, MIG disabled). About 40 s.
#
#   bench/gpu/shapes_check.sh OUT_DIR
#
# Runs the bundle's programs (XFERD_BUNDLE, default .devbundle: bench/gpu/README.md).
# Files in OUT_DIR: nvidia_smi.txt, probe.txt, probe.json, check_config.txt,
# check_config.json, run.toml, run.log, status.json, summary.txt.
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
out=${1:?usage: shapes_check.sh OUT_DIR}
use_bundle "$out"
daemon_workspace 19743

{
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,mig.mode.current,mig.mode.pending --format=csv
  echo "--- nvidia-smi conf-compute -f (CC feature), -grs (ready state), -gm (multi-GPU mode)"
  nvidia-smi conf-compute -f 2>&1
  nvidia-smi conf-compute -grs 2>&1
  nvidia-smi conf-compute -gm 2>&1
  echo "--- nvidia-smi -L"
  nvidia-smi -L
} > "$out/nvidia_smi.txt" 2>&1

timeout 120 "$b/xferd" probe --mode pinned --size 64MiB > "$out/probe.txt" 2>&1
timeout 120 "$b/xferd" probe --mode pinned --size 64MiB --json > "$out/probe.json" 2>> "$out/probe.txt"

xferd_toml "$port" "$work/state" > "$out/run.toml" <<TOML
[probe]
interval = "10s"
modes = ["pinned"]
bidirectional = false
max_duty_cycle = 1.0
TOML
# check-config reads a file: the one the run below uses.
timeout 30 "$b/xferd" check-config "$out/run.toml" > "$out/check_config.txt" 2>&1
timeout 30 "$b/xferd" check-config --json "$out/run.toml" > "$out/check_config.json" 2>&1
"$b/xferd" run --config "$out/run.toml" > "$out/run.log" 2>&1 &
pid=$!
for _ in $(seq 1 40); do
  python3 - "$port" > "$out/status.json" 2>/dev/null <<'PY' && break
import json, sys, urllib.request
doc = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v1/status", timeout=3))
if doc.get("daemon", {}).get("cycles", 0) < 1:
    sys.exit(1)
json.dump(doc, sys.stdout, indent=1)
PY
  sleep 1
done
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=

python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, re, sys
out = sys.argv[1]
smi = open(f"{out}/nvidia_smi.txt").read()
mig_smi = "enabled" if re.search(r",\s*Enabled", smi) else "disabled"
cc_smi = "on" if re.search(r"CC status:\s*ON", smi, re.I) else "off"
print(f"nvidia-smi: MIG {mig_smi}, CC {cc_smi}")
ok = True
def check(what, cc, mig):
    global ok
    good = cc == cc_smi and (mig is None or mig == mig_smi)
    ok = ok and good
    print(f"{'PASS' if good else 'FAIL'} {what}: CC {cc}" + (f", MIG {mig}" if mig else ""))
try:
    probe = json.load(open(f"{out}/probe.json"))
    for d in probe["devices"]:
        check(f"probe --json gpu {d['index']}", d["shape"]["confidential_computing"]["state"],
              d["shape"]["mig"]["mode"])
        if d["shape"]["confidential_computing"]["problem"]:
            print("  CC problem:", d["shape"]["confidential_computing"]["problem"])
except Exception as e:
    ok = False; print("FAIL probe --json:", e)
text = open(f"{out}/probe.txt").read()
m = re.search(r"shape: confidential computing (\w+).*?; MIG (\w+)", text)
check("probe text", m.group(1) if m else "missing", m.group(2) if m else "missing")
try:
    cfg = json.load(open(f"{out}/check_config.json"))
    check("check-config --json", cfg["confidential_computing"]["state"], None)
except Exception as e:
    ok = False; print("FAIL check-config --json:", e)
try:
    st = json.load(open(f"{out}/status.json"))
    for g in st["gpus"]:
        check(f"status API gpu {g['gpu']} (verdict {g['verdict']})",
              g["shape"]["confidential_computing"]["state"], g["shape"]["mig"]["mode"])
except Exception as e:
    ok = False; print("FAIL status API:", e)
print("ALL PASS" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
PY
