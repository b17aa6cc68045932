#!/usr/bin/env python3
"""PASS/FAIL per check of a multi_gpu_run.sh run, with the figures behind each.

    summarize_multi_gpu.py WORK_DIR [--json OUT.json]   the files multi_gpu_run.sh wrote
    summarize_multi_gpu.py --self-test                  checks itself on synthetic runs

Checks (a check whose files are absent says SKIP and why):
  solo       each GPU's pinned h2d/d2h from `xferd probe --gpu N` within 1 % of the plain
             cudaMemcpy loop on that GPU (median over the pairs of their ratio)
  topology   each GPU's NUMA node and PCIe path as xferd reports them; which GPUs share a
             link (xferd's uplink groups), beside `nvidia-smi topo -m` in machine.txt
  concurrent each GPU's figure and the aggregate of `xferd probe --concurrent` (group
             "host", all GPUs; one GPU is a group of one) within 3 % of the plain
             every-GPU-at-once reference xferd_all_gpus_copy (median over the pairs)
  run        `xferd run`: every GPU's series present (and the host group's with 2 or more
             GPUs), the series count within the documented budget, SIGTERM exit 0
  gpu_tests  xferd_gpu_tests --gpu N exit 0 on every GPU
  memcheck   the same under compute-sanitizer memcheck: exit 0, 0 errors
Exit status: 0 when nothing failed, 1 otherwise.
"""
import json
import os
import re
import statistics
import sys
import tempfile

SOLO_TOLERANCE = 0.01
CONCURRENT_TOLERANCE = 0.03
# docs/metrics.md "Series budget": per GPU, per concurrent group, per process.
BUDGET_PER_GPU, BUDGET_PER_GROUP, BUDGET_PER_PROCESS = 320, 10, 40


def load(path):
    try:
        with open(path) as f:
            text = f.read()
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def gb(x):
    return f"{x / 1e9:.2f}"


class Report:
    def __init__(self):
        self.rows = []

    def add(self, check, status, detail):
        self.rows.append({"check": check, "status": status, "detail": detail})

    def failed(self):
        return any(r["status"] == "FAIL" for r in self.rows)


def gpus_of(work):
    found = set()
    for name in os.listdir(work):
        m = re.match(r"(?:probe|plain)_gpu(\d+)_\d+\.json$", name) or re.match(
            r"gpu_tests_gpu(\d+)\.exit$", name)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


def pairs_of(work, pattern):
    return sorted(int(m.group(1)) for n in os.listdir(work) if (m := re.match(pattern, n)))


def probe_median(doc, direction):
    for r in (doc or {}).get("results", []):
        if r.get("mode") == "pinned" and r.get("direction") == direction and r.get("status") == "ok":
            return r["median_bytes_per_s"]
    return None


def plain_median(doc, direction):
    for r in (doc or {}).get("results", []):
        if r.get("mode") == "pinned" and r.get("direction") == direction and r.get("clock") == "events":
            return r["median_bytes_per_s"]
    return None


def check_solo(work, gpus, report):
    for g in gpus:
        reps = pairs_of(work, rf"probe_gpu{g}_(\d+)\.json$")
        for direction in ("h2d", "d2h"):
            ratios, probes, plains = [], [], []
            for rep in reps:
                p = probe_median(load(f"{work}/probe_gpu{g}_{rep}.json"), direction)
                q = plain_median(load(f"{work}/plain_gpu{g}_{rep}.json"), direction)
                if p and q:
                    ratios.append(p / q)
                    probes.append(p)
                    plains.append(q)
            name = f"solo gpu{g} {direction}"
            if not pairs_of(work, rf"plain_gpu{g}_(\d+)\.json$"):
                report.add(name, "SKIP", "no plain reference ran (a simulated run)")
                continue
            if not ratios:
                report.add(name, "FAIL", "no pair with both figures (see errors.log)")
                continue
            ratio = statistics.median(ratios)
            ok = abs(ratio - 1) <= SOLO_TOLERANCE
            report.add(name, "PASS" if ok else "FAIL",
                       f"xferd {gb(statistics.median(probes))} vs plain "
                       f"{gb(statistics.median(plains))} GB/s, ratio {ratio:.4f} over "
                       f"{len(ratios)} pairs (within {SOLO_TOLERANCE:.0%})")


def concurrent_docs(work):
    return [d for rep in pairs_of(work, r"concurrent_(\d+)\.json$")
            if (d := load(f"{work}/concurrent_{rep}.json"))]


def check_topology(work, gpus, report):
    for g in gpus:
        reps = pairs_of(work, rf"probe_gpu{g}_(\d+)\.json$")
        doc = load(f"{work}/probe_gpu{g}_{reps[0]}.json") if reps else None
        devices = (doc or {}).get("devices", [])
        if not devices:
            report.add(f"topology gpu{g}", "FAIL", "xferd probe reported no device")
            continue
        path = devices[0].get("link_path", {})
        links = [link["bdf"] for link in path.get("links", [])]
        narrowest = path.get("narrowest") or {}
        node = path.get("numa_node")
        ok = node is not None and (links or not path.get("pcie", True))
        report.add(f"topology gpu{g}", "PASS" if ok else "FAIL",
                   f"{devices[0].get('pci_bus_id')}: numa node {node if node is not None else '?'}"
                   f" ({'unknown' if node == -1 else 'known'}), path {' > '.join(links) or 'none'}"
                   + (f", narrowest Gen{narrowest.get('current_gen')} x{narrowest.get('current_width')}"
                      f" at {narrowest.get('bdf')}" if narrowest else ""))
    docs = concurrent_docs(work)
    if docs:
        shared = [f"GPUs {','.join(map(str, grp['gpus']))} share {grp['shared_link']}"
                  for grp in docs[0].get("groups", []) if grp["name"].startswith("uplink_")]
        report.add("topology shared links", "INFO",
                   "; ".join(shared) if shared else "no two GPUs share a PCIe link (xferd finds "
                   "no uplink group; see nvidia-smi topo -m in machine.txt)")


def host_group(doc):
    for grp in (doc or {}).get("groups", []):
        if grp["name"] == "host":
            return grp
    return None


def check_concurrent(work, gpus, report):
    docs = concurrent_docs(work)
    refs = [d for rep in pairs_of(work, r"all_gpus_(\d+)\.json$")
            if (d := load(f"{work}/all_gpus_{rep}.json"))]
    if not pairs_of(work, r"all_gpus_(\d+)\.json$"):
        report.add("concurrent", "SKIP", "no plain reference ran (a simulated run)")
        return
    if not docs or not refs:
        report.add("concurrent", "FAIL",
                   f"{len(docs)} xferd probe --concurrent and {len(refs)} xferd_all_gpus_copy "
                   "documents (see errors.log, all_gpus_*.txt)")
        return
    for direction in ("h2d", "d2h"):
        per_gpu, aggregates = {}, []
        for doc, ref in zip(docs, refs):
            grp = host_group(doc)
            run = next((r for r in (grp or {}).get("runs", []) if r["direction"] == direction), None)
            ref_run = next((r for r in ref.get("results", []) if r["direction"] == direction), None)
            if not run or not ref_run:
                continue
            ref_gpu = {x["gpu"]: x["all_bytes_per_s"] for x in ref_run["per_gpu"]}
            for x in run["per_gpu"]:
                if x["status"] == "ok" and ref_gpu.get(x["gpu"]):
                    per_gpu.setdefault(x["gpu"], []).append(
                        (x["concurrent_bytes_per_s"], ref_gpu[x["gpu"]]))
            if run["aggregate_bytes_per_s"] > 0 and ref_run["aggregate_bytes_per_s"] > 0:
                aggregates.append((run["aggregate_bytes_per_s"], ref_run["aggregate_bytes_per_s"]))
        for g in gpus:
            pairs = per_gpu.get(g, [])
            name = f"concurrent gpu{g} {direction}"
            if not pairs:
                report.add(name, "FAIL", "no figure from both xferd and the reference")
                continue
            ratio = statistics.median(a / b for a, b in pairs)
            report.add(name, "PASS" if abs(ratio - 1) <= CONCURRENT_TOLERANCE else "FAIL",
                       f"xferd {gb(statistics.median(a for a, _ in pairs))} vs reference "
                       f"{gb(statistics.median(b for _, b in pairs))} GB/s, ratio {ratio:.4f}")
        name = f"concurrent aggregate {direction}"
        if not aggregates:
            report.add(name, "FAIL", "no aggregate from both")
            continue
        ratio = statistics.median(a / b for a, b in aggregates)
        band = (host_group(docs[0]) or {}).get("expected_band", {})
        report.add(name, "PASS" if abs(ratio - 1) <= CONCURRENT_TOLERANCE else "FAIL",
                   f"xferd {gb(statistics.median(a for a, _ in aggregates))} vs reference "
                   f"{gb(statistics.median(b for _, b in aggregates))} GB/s, ratio {ratio:.4f}; "
                   f"expected {gb(band.get('lower_bytes_per_s', 0))}-"
                   f"{gb(band.get('upper_bytes_per_s', 0))}")


def series(text):
    return [line for line in text.splitlines() if line.startswith("xferd_")]


def check_run(work, gpus, report):
    text = read(f"{work}/metrics.prom")
    code = (read(f"{work}/xferd_run.exit") or "").strip()
    if text is None and not code:
        report.add("run", "SKIP", "no xferd run")
        return
    lines = series(text or "")
    missing = []

    def present(family, *labels):
        return any(line.startswith(family + "{") and all(lb in line for lb in labels)
                   for line in lines)

    for g in gpus:
        gpu = f'gpu="{g}"'
        for family in ("xferd_bandwidth_bytes_per_second", "xferd_device_info"):
            if not present(family, gpu):
                missing.append(f"{family}{{{gpu}}}")
        if len(gpus) >= 2 and not present("xferd_concurrent_bandwidth_bytes_per_second", gpu,
                                          'group="host"'):
            missing.append(f'xferd_concurrent_bandwidth_bytes_per_second{{{gpu},group="host"}}')
    if len(gpus) >= 2 and not any(
            line.startswith("xferd_host_aggregate_bandwidth_bytes_per_second") and 'group="host"' in line
            for line in lines):
        missing.append('xferd_host_aggregate_bandwidth_bytes_per_second{group="host"}')
    report.add("run series present", "PASS" if lines and not missing else "FAIL",
               f"{len(gpus)} GPUs" + (f"; missing: {', '.join(missing)}" if missing else ""))
    groups = {m.group(1) for line in lines if (m := re.search(r'group="([^"]+)"', line))}
    budget = BUDGET_PER_GPU * len(gpus) + BUDGET_PER_GROUP * len(groups) + BUDGET_PER_PROCESS
    report.add("run series budget", "PASS" if 0 < len(lines) <= budget else "FAIL",
               f"{len(lines)} xferd_ series for {len(gpus)} GPUs and {len(groups)} groups, budget "
               f"{budget} ({BUDGET_PER_GPU}/GPU + {BUDGET_PER_GROUP}/group + {BUDGET_PER_PROCESS}); "
               f"{len((text or '').encode())} bytes per scrape")
    report.add("run SIGTERM exit", "PASS" if code == "0" else "FAIL", f"exit {code or '?'}")


def check_step(work, stem, check, report, not_run, judge):
    """A row for the step that left STEM.exit and STEM.log in work: SKIP (not_run) without
    an exit status, else PASS or FAIL as judge(exit status, log) -> (ok, detail) says."""
    code = (read(f"{work}/{stem}.exit") or "").strip()
    if not code:
        report.add(check, "SKIP", not_run)
        return
    ok, detail = judge(code, read(f"{work}/{stem}.log") or "")
    report.add(check, "PASS" if ok else "FAIL", detail)


def check_tests(work, gpus, report):
    def gpu_tests(code, log):
        passed = re.findall(r"\[  PASSED  \] (\d+) tests?", log)
        return code == "0", f"exit {code}" + (f", {passed[-1]} passed" if passed else "")

    def memcheck(code, log):
        summary = re.findall(r"ERROR SUMMARY: (\d+) errors?", log)
        return (code == "0" and all(s == "0" for s in summary),
                f"exit {code}, error summary {', '.join(summary) or 'none'}")

    for g in gpus:
        check_step(work, f"gpu_tests_gpu{g}", f"gpu_tests gpu{g}", report, "not run", gpu_tests)
        check_step(work, f"memcheck_gpu{g}", f"memcheck gpu{g}", report,
                   "compute-sanitizer not run", memcheck)


def summarize(work):
    report = Report()
    gpus = gpus_of(work)
    check_solo(work, gpus, report)
    check_topology(work, gpus, report)
    check_concurrent(work, gpus, report)
    check_run(work, gpus, report)
    check_tests(work, gpus, report)
    return report


def print_report(report, out=sys.stdout):
    for r in report.rows:
        print(f"{r['status']:<5} {r['check']:<30} {r['detail']}", file=out)
    print("FAILED" if report.failed() else "ALL PASSED", file=out)


# ---- self-test: synthetic runs ----------------------------------------------------------

def write(path, doc):
    with open(path, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))


def synthetic(work, probe_scale=1.0, aggregate_scale=1.0, drop_series=False, exit_code=0):
    gbps = 1e9
    for g in (0, 1):
        for rep in (1, 2, 3):
            write(f"{work}/plain_gpu{g}_{rep}.json", {"results": [
                {"mode": "pinned", "direction": d, "clock": "events", "median_bytes_per_s": 50 * gbps}
                for d in ("h2d", "d2h")]})
            write(f"{work}/probe_gpu{g}_{rep}.json", {
                "devices": [{"pci_bus_id": f"0000:1{g}:00.0", "link_path": {
                    "pcie": True, "numa_node": g, "links": [{"bdf": f"0000:1{g}:00.0"},
                                                              {"bdf": "0000:0f:00.0"}],
                    "narrowest": {"bdf": "0000:0f:00.0", "current_gen": 5, "current_width": 16}}}],
                "results": [{"mode": "pinned", "direction": d, "status": "ok",
                             "median_bytes_per_s": 50 * gbps * probe_scale} for d in ("h2d", "d2h")]})
        write(f"{work}/gpu_tests_gpu{g}.exit", "0\n")
        write(f"{work}/gpu_tests_gpu{g}.log", "[  PASSED  ] 15 tests.\n")
        write(f"{work}/memcheck_gpu{g}.exit", "0\n")
        write(f"{work}/memcheck_gpu{g}.log", "========= ERROR SUMMARY: 0 errors\n")
    for rep in (1, 2, 3):
        write(f"{work}/all_gpus_{rep}.json", {"results": [
            {"direction": d, "aggregate_bytes_per_s": 50 * gbps,
             "per_gpu": [{"gpu": g, "all_bytes_per_s": 25 * gbps} for g in (0, 1)]}
            for d in ("h2d", "d2h")]})
        write(f"{work}/concurrent_{rep}.json", {"groups": [
            {"name": "host", "gpus": [0, 1], "shared_link": "0000:0f:00.0 Gen5 x16",
             "expected_band": {"lower_bytes_per_s": 39.7e9, "upper_bytes_per_s": 52.3e9},
             "runs": [{"direction": d, "aggregate_bytes_per_s": 50 * gbps * aggregate_scale,
                       "per_gpu": [{"gpu": g, "status": "ok",
                                    "concurrent_bytes_per_s": 25 * gbps * aggregate_scale}
                                   for g in (0, 1)]} for d in ("h2d", "d2h")]},
            {"name": "uplink_0000:0f:00.0", "gpus": [0, 1], "shared_link": "0000:0f:00.0 Gen5 x16",
             "runs": []}]})
    lines = []
    for g in (0, 1):
        if not (drop_series and g == 1):
            lines.append(f'xferd_bandwidth_bytes_per_second{{direction="h2d",gpu="{g}",mode="pinned",size="64MiB"}} 5e10')
        lines.append(f'xferd_device_info{{gpu="{g}",host_link="pcie",name="x"}} 1')
        lines.append(f'xferd_concurrent_bandwidth_bytes_per_second{{direction="h2d",gpu="{g}",group="host"}} 2.5e10')
    lines.append('xferd_host_aggregate_bandwidth_bytes_per_second{direction="h2d",group="host"} 5e10')
    write(f"{work}/metrics.prom", "\n".join(lines) + "\n")
    write(f"{work}/xferd_run.exit", f"{exit_code}\n")


def self_test():
    def run(**kwargs):
        with tempfile.TemporaryDirectory() as work:
            synthetic(work, **kwargs)
            return {r["check"]: r["status"] for r in summarize(work).rows}

    good = run()
    assert all(s in ("PASS", "INFO") for s in good.values()), good
    assert good["solo gpu1 d2h"] == "PASS" and good["concurrent aggregate h2d"] == "PASS", good
    slow = run(probe_scale=0.97)
    assert slow["solo gpu0 h2d"] == "FAIL", slow
    off = run(aggregate_scale=1.05)
    assert off["concurrent aggregate d2h"] == "FAIL" and off["concurrent gpu1 h2d"] == "FAIL", off
    missing = run(drop_series=True, exit_code=1)
    assert missing["run series present"] == "FAIL" and missing["run SIGTERM exit"] == "FAIL", missing
    with tempfile.TemporaryDirectory() as work:  # nothing ran: skips, no failure
        assert not summarize(work).failed()
    print("summarize_multi_gpu self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--json"):
        print(__doc__, file=sys.stderr)
        return 64
    report = summarize(argv[1])
    print_report(report)
    if len(argv) == 4:
        with open(argv[3], "w") as f:
            json.dump({"checks": report.rows, "failed": report.failed()}, f, indent=1)
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
