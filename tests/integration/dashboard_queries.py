"""Reads the PromQL out of the shipped Grafana dashboards, with template variables
substituted, so that tests run exactly what Grafana would send."""
import json
import re

import yaml

from deploy_support import DASHBOARD_DIR, RULES_FILE

DASHBOARDS = ("xferd-device.json", "xferd-fleet.json")

# What Grafana puts in for its built-in interval variables; chosen for a 1 s scrape.
BUILTINS = {"__rate_interval": "20s", "__interval": "5s", "__range": "5m"}


def load(name):
    return json.loads((DASHBOARD_DIR / name).read_text())


def panels(doc):
    """Every panel, rows' nested panels included (collapsed rows keep theirs inside)."""
    for p in doc["panels"]:
        yield p
        yield from p.get("panels", [])


def substitute(expr, values):
    """Replace $var, ${var} and ${var:format} the way Grafana does for a regex value."""
    def repl(m):
        name = m.group(1) or m.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        if name not in values:
            raise KeyError(f"unknown variable ${name} in {expr!r}")
        return values[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)


def panel_queries(doc, values):
    """(panel title, refId, instant, substituted expr) for every query of every panel."""
    for p in panels(doc):
        for t in p.get("targets", []):
            yield p["title"], t["refId"], bool(t.get("instant")), substitute(t["expr"], values)


# Series not every setup has: those of the concurrent group probes (host aggregates), which
# need a host of 2 GPUs or more, and dcgm-exporter's, which need a dcgm-exporter scraped
# beside xferd (tests/integration/test_dcgm_join.py scrapes one). A query reading one of
# them, directly or through a recording rule, is held to return data only once some target
# exports it; until then the tests list it as waiting. The check tightens by itself when a
# target exports the series.
NOT_EXPORTED_EVERYWHERE = frozenset({
    "xferd_concurrent_bandwidth_bytes_per_second",
    "xferd_host_aggregate_bandwidth_bytes_per_second",
    "xferd_host_aggregate_expected_bandwidth_bytes_per_second",
    "xferd_concurrent_group_info",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_PCIE_LINK_GEN",
})
_NAME = re.compile(r"\b([a-zA-Z_]\w*:\w+(?::\w+)*|xferd_\w+|DCGM_\w+)\b")

# The row titles that mark panels reading what only the full metrics profile exports
# (dashboards/generate.py, FULL_PROFILE).
FULL_PROFILE = " (full profile)"


def full_profile_panels(doc):
    """The titles of the panels under rows marked FULL_PROFILE."""
    out, inside = set(), False
    for p in doc["panels"]:
        if p["type"] == "row":
            inside = p["title"].endswith(FULL_PROFILE)
            out |= {q["title"] for q in p.get("panels", [])} if inside else set()
        elif inside:
            out.add(p["title"])
    return out


def series_read(expr):
    """The names an expression reads, with every recorded series replaced by what its rule
    reads (recursively)."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    recorded = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"]
                if "record" in r}
    seen, todo = set(), set(_NAME.findall(expr))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in recorded:
            todo |= set(_NAME.findall(recorded[name]))
    return {n for n in seen if n not in recorded}


def waiting_for(expr, exported):
    """The series of NOT_EXPORTED_EVERYWHERE that `expr` reads and no target exports yet
    (`exported`: those some target does)."""
    return (series_read(expr) & NOT_EXPORTED_EVERYWHERE) - set(exported)


def query_data_report(prometheus, docs_and_values, profile="full"):
    """Runs every panel query of the given dashboards against a Prometheus API object that
    scrapes daemons of the metrics `profile`. Returns (empty, waiting): queries without data
    that should have some, and queries excused because they read series no target exports
    yet or, in the fleet profile, sit in a row marked for the full profile."""
    exported = {n for n in NOT_EXPORTED_EVERYWHERE if prometheus.query(f"count({n})")}
    empty, waiting = [], []
    for name, doc, values in docs_and_values:
        full_only = full_profile_panels(doc) if profile == "fleet" else set()
        for title, ref, _instant, expr in panel_queries(doc, values):
            if prometheus.query(expr):
                continue
            missing = waiting_for(expr, exported)
            if title in full_only:
                waiting.append(f"{name}: {title} [{ref}]: full profile only")
                continue
            (waiting if missing else empty).append(
                f"{name}: {title} [{ref}]: {expr}" + (f" (waits for {sorted(missing)})"
                                                     if missing else ""))
    return empty, waiting
