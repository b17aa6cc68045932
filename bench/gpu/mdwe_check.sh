#!/usr/bin/env bash
# Can the unit turn on MemoryDenyWriteExecute= (W^X) on this GPU host? Runs `xferd probe`
# (CUDA backend, every mode, also with the PTX JIT forced) plainly, under the kernel's W^X
# (prctl PR_SET_MDWE, Linux >= 6.3: what systemd 255+ applies for the setting) and, where
# systemd is PID 1, under `systemd-run -p MemoryDenyWriteExecute=yes` (systemd's own
# mechanism, seccomp before 255). Prints PASS or FAIL per case with the error.
#
#   bench/gpu/mdwe_check.sh [XFERD]       from the repository root, on the GPU host
#
# XFERD: the binary (default: the bundle's, $XFERD_BUNDLE/build/xferd, else build/xferd).
# The helper xferd_mdwe_exec comes from the bench build (next to XFERD) or is compiled here
# with c++. Logs go to $OUT/mdwe (or a temporary directory). Exit 0: every case passed;
# 1: a W^X case failed where the plain one passed; 2: inconclusive (a plain case failed,
# or no W^X mechanism here).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${XFERD_BUNDLE:-.devbundle}
if [[ -n ${1:-} ]]; then xferd=$1
elif [[ -x $bundle/build/xferd ]]; then xferd=$bundle/build/xferd
else xferd=build/xferd; fi
[[ -x $xferd ]] || { echo "mdwe_check: no xferd at $xferd (give its path)" >&2; exit 2; }
xferd=$(cd "$(dirname "$xferd")" && pwd)/$(basename "$xferd")
logs=${OUT:+$OUT/mdwe}
logs=${logs:-$(mktemp -d)}
mkdir -p "$logs"

helper=$(dirname "$xferd")/bench/gpu/xferd_mdwe_exec
if [[ ! -x $helper ]]; then
  helper=$logs/xferd_mdwe_exec
  c++ -std=c++17 -O2 -o "$helper" "$here/mdwe_exec.cc" ||
    { echo "mdwe_check: cannot build $here/mdwe_exec.cc (no c++?)" >&2; exit 2; }
fi

# Every mode at one size: small and few, the question is whether they run at all.
probe=("$xferd" probe --json --size 16MiB --iterations 5 --warmup 1)
jit_env=(CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_DISABLE=1)

echo "mdwe_check: $("$xferd" version 2>&1 | head -1); kernel $(uname -r); logs in $logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/mdwe_check: GPU /'

# verdict NAME: PASS when the probe ran (exit 0, or 1 = a reading below its band) and every
# result is ok (or unsupported by the device), else FAIL with the first error.
verdict() {
  local name=$1 rc
  rc=$(cat "$logs/$name.rc")
  python3 - "$logs/$name" "$rc" <<'EOF'
import json, sys
base, rc = sys.argv[1], int(sys.argv[2])
err = open(base + ".err", errors="replace").read().strip().splitlines()
try:
    results = json.load(open(base + ".json"))["results"]
except (OSError, ValueError, KeyError):
    results = []
bad = [r for r in results if r.get("status") not in ("ok", "unsupported")]
name = base.rsplit("/", 1)[-1]
if rc in (0, 1) and results and not bad:
    print(f"PASS  {name}: {len(results)} probes ok")
    sys.exit(0)
why = (f"{bad[0]['mode']} {bad[0]['direction']}: {bad[0]['status']}: {bad[0].get('message', '')}"
       if bad else (err[-1] if err else "no output"))
signal = f" (killed by signal {rc - 128})" if rc > 128 else ""
print(f"FAIL  {name}: exit {rc}{signal}, {len(bad)} of {len(results)} probes failed; {why}")
sys.exit(1)
EOF
}

# run NAME COMMAND...: the probe's JSON, stderr and exit status under $logs.
run() {
  local name=$1; shift
  timeout 300 "$@" > "$logs/$name.json" 2> "$logs/$name.err"
  echo $? > "$logs/$name.rc"
  verdict "$name"
}

status=0
run plain "${probe[@]}" || status=2
run plain-jit env "${jit_env[@]}" "${probe[@]}" || status=2

selftest=$("$helper" --self-test 2>&1)
case $? in
  0)
    echo "mdwe_check: kernel W^X: $selftest"
    run kernel-mdwe "$helper" "${probe[@]}" || { [[ $status -eq 0 ]] && status=1; }
    run kernel-mdwe-jit env "${jit_env[@]}" "$helper" "${probe[@]}" ||
      { [[ $status -eq 0 ]] && status=1; }
    ;;
  *)
    echo "SKIP  kernel-mdwe: $selftest"
    kernel_skipped=1
    ;;
esac

if [[ $(cat /proc/1/comm 2>/dev/null) == systemd ]] && command -v systemd-run >/dev/null; then
  # A transient service does not inherit this shell's environment: pass the library path
  # (a bundle's libraries) on, and run it plainly first so that only W^X differs.
  sd=(systemd-run --wait --pipe --quiet --collect -p LimitMEMLOCK=1G)
  [[ -n ${LD_LIBRARY_PATH:-} ]] && sd+=("--setenv=LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
  if run systemd-plain "${sd[@]}" "${probe[@]}"; then
    run systemd-mdwe "${sd[@]}" -p MemoryDenyWriteExecute=yes "${probe[@]}" ||
      { [[ $status -eq 0 ]] && status=1; }
    run systemd-mdwe-jit "${sd[@]}" -p MemoryDenyWriteExecute=yes \
      --setenv=CUDA_FORCE_PTX_JIT=1 --setenv=CUDA_CACHE_DISABLE=1 "${probe[@]}" ||
      { [[ $status -eq 0 ]] && status=1; }
  else
    status=2
  fi
else
  echo "SKIP  systemd-mdwe: systemd is not PID 1 here"
  [[ ${kernel_skipped:-0} -eq 1 && $status -eq 0 ]] && status=2
fi

case $status in
  0) echo "mdwe_check: PASS: the CUDA backend works under W^X; MemoryDenyWriteExecute=yes can be turned on for this driver" ;;
  1) echo "mdwe_check: FAIL: the CUDA backend breaks under W^X; keep MemoryDenyWriteExecute=no" ;;
  *) echo "mdwe_check: INCONCLUSIVE: see above" ;;
esac
exit "$status"
