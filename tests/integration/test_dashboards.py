"""The Grafana dashboards: current panel types, one datasource variable used everywhere,
stable unique uids, and JSON that matches its generator."""
import importlib.util
import json
import re

import pytest

from dashboard_queries import DASHBOARDS, full_profile_panels, load, panels, substitute
from deploy_support import DASHBOARD_DIR, SOURCE_DIR

DEPRECATED = {"graph", "singlestat", "table-old", "grafana-piechart-panel",
              "grafana-worldmap-panel", "heatmap-old"}
CURRENT = {"row", "timeseries", "stat", "table", "heatmap", "bargauge", "histogram",
           "gauge", "barchart", "state-timeline", "text"}
STABLE_UIDS = {"xferd-device.json": "xferd-device", "xferd-fleet.json": "xferd-fleet"}
DS_VAR = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(params=DASHBOARDS)
def dashboard(request):
    return request.param, load(request.param)


def test_no_import_inputs(dashboard):
    name, doc = dashboard
    text = (DASHBOARD_DIR / name).read_text()
    assert "${DS_" not in text and "__inputs" not in doc, \
        f"{name}: use the datasource variable, not import-time ${{DS_...}} inputs"


def test_uid_is_stable(dashboard):
    name, doc = dashboard
    assert doc["uid"] == STABLE_UIDS[name]
    assert doc.get("id") is None  # an id from an export would clash on another Grafana
    assert 36 <= doc["schemaVersion"] <= 41


def test_uids_unique_across_dashboards():
    uids = [load(n)["uid"] for n in DASHBOARDS]
    assert len(set(uids)) == len(uids)


def test_panel_types_are_current(dashboard):
    name, doc = dashboard
    for p in panels(doc):
        assert p["type"] not in DEPRECATED, f"{name}: {p['title']} is a deprecated {p['type']}"
        assert p["type"] in CURRENT, f"{name}: {p['title']}: unexpected panel type {p['type']}"


def test_every_panel_and_query_uses_the_datasource_variable(dashboard):
    name, doc = dashboard
    variables = doc["templating"]["list"]
    ds = [v for v in variables if v["type"] == "datasource"]
    assert len(ds) == 1 and ds[0]["name"] == "datasource" and ds[0]["query"] == "prometheus"
    for v in variables:
        if v["type"] == "query":
            assert v["datasource"] == DS_VAR, f"{name}: variable {v['name']}"
    for p in panels(doc):
        if p["type"] == "row":
            continue
        assert p.get("datasource") == DS_VAR, f"{name}: panel {p['title']!r}"
        assert p.get("targets"), f"{name}: panel {p['title']!r} has no query"
        for t in p["targets"]:
            assert t.get("datasource") == DS_VAR, f"{name}: {p['title']!r} target {t['refId']}"
            assert t.get("expr"), f"{name}: {p['title']!r} target {t['refId']} has no expr"
    for a in doc["annotations"]["list"]:
        if not a.get("builtIn"):
            assert a["datasource"] == DS_VAR


def test_panel_ids_unique_and_grid_in_bounds(dashboard):
    name, doc = dashboard
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    for p in panels(doc):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, f"{name}: {p['title']} off the grid"


def test_variables_expected(dashboard):
    name, doc = dashboard
    names = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "instance", "mode"} <= names
    if name == "xferd-device.json":
        assert "gpu" in names


def test_every_variable_used_in_queries_is_defined(dashboard):
    name, doc = dashboard
    values = {v["name"]: ".+" for v in doc["templating"]["list"]}
    for p in panels(doc):
        for t in p.get("targets", []):
            substitute(t["expr"], values)  # raises on an undefined $variable


def test_device_dashboard_has_the_panels_the_issue_asks_for():
    doc = load("xferd-device.json")
    exprs = " ".join(t["expr"] for p in panels(doc) for t in p.get("targets", []))
    types = {p["type"] for p in panels(doc)}
    assert {"timeseries", "heatmap", "stat", "table", "bargauge"} <= types
    for needle in ("xferd_expected_bandwidth_bytes_per_second", "histogram_quantile(0.5,",
                   "histogram_quantile(0.99,", "histogram_quantile(0.999,",
                   'mode="pageable"', "xferd_overlap_ratio", "xferd_pcie_link_generation",
                   "xferd_pcie_link_width", "xferd_probe_runs_total", "xferd_pcie_replays_total",
                   "xferd_pcie_aer_errors_total", "xferd_pcie_error_source_readable",
                   "xferd_pcie_link_transitions_total", "xferd_pcie_link_reduced_seconds_total"):
        assert needle in exprs, f"device dashboard lacks {needle}"
    band = next(p for p in panels(doc) if p["title"] == "Bandwidth by mode and direction")
    fills = [prop for o in band["fieldConfig"]["overrides"] for prop in o["properties"]
             if prop["id"] == "custom.fillBelowTo"]
    assert fills, "the expected band is not shaded"
    reds = [o for o in band["fieldConfig"]["overrides"]
            if {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}} in o["properties"]]
    assert reds, "readings below the band are not shown red"


def test_fleet_dashboard_has_the_panels_the_issue_asks_for():
    doc = load("xferd-fleet.json")
    exprs = " ".join(t["expr"] for p in panels(doc) for t in p.get("targets", []))
    assert "bottomk(" in exprs and "quantile by" in exprs
    assert "instance_gpu:xferd_pcie_link_downtrained:bool" in exprs
    assert any(p["type"] == "histogram" for p in panels(doc))


def row_contents(doc, title):
    """The panels placed under the row called `title` (up to the next row)."""
    out, inside = [], False
    for p in doc["panels"]:
        if p["type"] == "row":
            inside = p["title"] == title
        elif inside:
            out.append(p)
    return out


def test_fleet_dashboard_compares_each_gpu_with_its_peers():
    doc = load("xferd-fleet.json")
    peers = row_contents(doc, "Fleet peers")
    exprs = [t["expr"] for p in peers for t in p["targets"]]
    assert any("xferd_bandwidth_over_fleet_peer_median:ratio" in e and "peer_group" in e
               for e in exprs), exprs
    table = next(p for p in peers if p["type"] == "table")
    # Red below the 0.9 the alert uses.
    steps = table["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps == [{"color": "red", "value": None}, {"color": "green", "value": 0.9}]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_host_aggregates_row(name):
    doc = load(name)
    row = row_contents(doc, "Host aggregates")
    assert row, f"{name}: no Host aggregates row"
    exprs = " ".join(t["expr"] for p in row for t in p["targets"])
    if name == "xferd-device.json":
        for needle in ("xferd_host_aggregate_bandwidth_bytes_per_second",
                       'xferd_host_aggregate_expected_bandwidth_bytes_per_second{instance=~"$instance",bound="lower"}',
                       "xferd_concurrent_bandwidth_bytes_per_second", "xferd_concurrent_group_info"):
            assert needle in exprs, f"{name}: Host aggregates row lacks {needle}"
    else:
        for needle in ("instance_group_direction:xferd_host_aggregate_over_expected_lower:ratio",
                       "instance_gpu_direction_group:xferd_concurrent_over_solo:ratio"):
            assert needle in exprs, f"{name}: Host aggregates row lacks {needle}"


def test_json_matches_its_generator():
    spec = importlib.util.spec_from_file_location("generate", SOURCE_DIR / "dashboards/generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for name, doc in gen.render().items():
        assert (DASHBOARD_DIR / name).read_text() == gen.serialize(doc), \
            f"{name} differs from dashboards/generate.py: run python3 dashboards/generate.py"


def test_recording_rules_used_by_dashboards_exist():
    import yaml
    rules = yaml.safe_load((SOURCE_DIR / "deploy/prometheus/xferd.rules.yml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    for name in DASHBOARDS:
        doc = load(name)
        for p in panels(doc):
            for t in p.get("targets", []):
                for m in re.findall(r"\b(\w+:\w+:\w+)\b", t["expr"]):
                    assert m in recorded, f"{name}: {p['title']} uses {m}, which no rule records"


def test_grafana_provisioning_files():
    import yaml
    base = SOURCE_DIR / "deploy/grafana/provisioning"
    ds = yaml.safe_load((base / "datasources/xferd.yml").read_text())
    assert ds["apiVersion"] == 1
    assert [d["type"] for d in ds["datasources"]] == ["prometheus"]
    dash = yaml.safe_load((base / "dashboards/xferd.yml").read_text())
    (provider,) = dash["providers"]
    assert provider["type"] == "file"
    # Where the .deb puts the dashboards (cmake/Packaging.cmake).
    assert provider["options"]["path"] == "/usr/share/xferd/dashboards"


# What the fleet metrics profile does not export (exporter/families.h: kFleetNone), and the
# pageable gauges of a healthy GPU (it keeps the headline pinned pairs only).
FLEET_DROPS = ("xferd_transfer_duration_seconds", "xferd_overlap_ratio",
               "xferd_foreign_traffic_bytes_per_second", "xferd_gpu_load_readable",
               "xferd_pcie_aer_rootport_errors_total", 'mode="pageable"')


@pytest.mark.parametrize("name", DASHBOARDS)
def test_only_panels_marked_for_the_full_profile_read_what_the_fleet_profile_drops(name):
    doc = load(name)
    marked = full_profile_panels(doc)
    for p in panels(doc):
        if p["type"] == "row":
            continue
        exprs = " ".join(t["expr"] for t in p["targets"])
        reads = [d for d in FLEET_DROPS if d in exprs]
        if p["title"] in marked:
            assert "full metrics profile" in p["description"], p["title"]
        else:
            assert not reads, f"{name}: {p['title']!r} reads {reads} outside a full-profile row"
    if name == "xferd-device.json":
        assert {"Transfer latency p50 / p99 / p99.9", "Pinned over pageable speedup"} <= marked


def test_fleet_dashboard_shows_the_verdict_beside_dcgm_by_uuid():
    doc = load("xferd-fleet.json")
    (panel,) = row_contents(doc, "Beside dcgm-exporter")
    exprs = [t["expr"] for t in panel["targets"]]
    assert any("UUID:xferd_gpu_degraded:max" in e for e in exprs), exprs
    for metric in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_LINK_GEN"):
        (e,) = [e for e in exprs if metric in e]
        assert "on (UUID)" in e and "max by (UUID)" in e, e
    joins = [t for t in panel["transformations"] if t["id"] == "joinByField"]
    assert joins and joins[0]["options"]["byField"] == "UUID"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_no_panel_selects_a_label_the_fleet_profile_folds_away(name):
    # The fleet profile sums the run counters over modes and the AER counters over the
    # path's devices, and keeps the newest success of any mode: a selector that asks those
    # families for a mode or a device by value would find nothing there.
    folded = re.compile(r'(xferd_probe_runs_total|xferd_probe_last_success_timestamp_seconds)'
                        r'\{[^}]*mode=~"\$mode"'
                        r'|xferd_pcie_aer_errors_total\{[^}]*device=')
    for p in panels(load(name)):
        for t in p.get("targets", []):
            assert not folded.search(t["expr"]), f"{name}: {p['title']!r}: {t['expr']}"
