"""The shipped Prometheus rules and example config pass promtool, and the rule unit tests
cover a firing and a quiet case for every alert, on the series of each metrics profile:
xferd.rules.test.yml on the full profile's, xferd.rules.fleet.test.yml on the fleet
profile's."""
import subprocess

import pytest
import yaml

from deploy_support import (RULES_FILE, RULES_FLEET_TEST_FILE, RULES_TEST_FILE, SOURCE_DIR,
                            require_tool)

# One promtool test file per metrics profile.
PROFILE_TESTS = {"full": RULES_TEST_FILE, "fleet": RULES_FLEET_TEST_FILE}


def promtool(*args):
    tool = require_tool("promtool")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120,
                          cwd=RULES_FILE.parent)


def alert_names():
    rules = yaml.safe_load(RULES_FILE.read_text())
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules():
    r = promtool("check", "rules", str(RULES_FILE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@pytest.mark.parametrize("profile", PROFILE_TESTS)
def test_promtool_test_rules(profile):
    r = promtool("test", "rules", str(PROFILE_TESTS[profile]))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_example_scrape_config_is_valid():
    r = promtool("check", "config", str(SOURCE_DIR / "deploy/prometheus/prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_alerts_the_issue_asks_for_exist():
    assert {"XferdBandwidthBelowExpected", "XferdBandwidthDriftBelowBaseline",
            "XferdPcieLinkDowntrained", "XferdProbesFailing", "XferdProbesStale",
            "XferdTargetDown", "XferdBandwidthBelowFleetPeers",
            "XferdHostAggregateBelowExpected",
            "XferdConcurrentBandwidthFarBelowSolo", "XferdPcieLinkErrorsRising",
            "XferdPcieUncorrectableErrors", "XferdVerdictStale"} <= set(alert_names())


@pytest.mark.parametrize("profile", PROFILE_TESTS)
def test_every_recording_rule_is_checked_by_a_unit_test(profile):
    # Each recorded series is evaluated by name in some promql_expr_test, or read by an
    # alert that a unit test fires.
    rules = yaml.safe_load(RULES_FILE.read_text())
    tests = yaml.safe_load(PROFILE_TESTS[profile].read_text())
    checked = " ".join(t["expr"] for case in tests["tests"]
                       for t in case.get("promql_expr_test", []))
    fired = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", [])
             if t.get("exp_alerts")}
    alerts = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"]
                      if r.get("alert") in fired)
    for g in rules["groups"]:
        for r in g["rules"]:
            if "record" in r:
                assert r["record"] in checked or r["record"] in alerts, \
                    f"no {profile} promtool case evaluates {r['record']}"


def test_every_alert_has_a_runbook_style_description():
    rules = yaml.safe_load(RULES_FILE.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            name = rule["alert"]
            ann = rule.get("annotations", {})
            assert ann.get("summary"), f"{name}: no summary"
            desc = ann.get("description", "")
            assert "Check:" in desc, f"{name}: the description must say what to check"
            assert rule.get("labels", {}).get("severity") in ("info", "warning", "critical")
            assert rule.get("for"), f"{name}: no `for:` - one bad scrape would page"


@pytest.mark.parametrize("profile", PROFILE_TESTS)
def test_every_alert_fires_and_stays_quiet_in_the_unit_tests(profile):
    tests = yaml.safe_load(PROFILE_TESTS[profile].read_text())
    fired, quiet = set(), set()
    for case in tests["tests"]:
        for t in case.get("alert_rule_test", []):
            (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
    for name in alert_names():
        assert name in fired, f"no {profile} promtool case where {name} fires"
        assert name in quiet, f"no {profile} promtool case where {name} must stay quiet"


def test_the_fleet_cases_feed_the_alerts_what_the_fleet_profile_exports():
    # No input series of the fleet cases carries what that profile drops or folds away: a
    # histogram, a mode on a run counter or last success, a device on an AER counter.
    tests = yaml.safe_load(RULES_FLEET_TEST_FILE.read_text())
    dropped = ("xferd_transfer_duration_seconds", "xferd_overlap_ratio",
               "xferd_foreign_traffic_bytes_per_second", "xferd_gpu_load_readable",
               "xferd_pcie_aer_rootport_errors_total")
    for case in tests["tests"]:
        for s in case["input_series"]:
            series = s["series"]
            assert not series.startswith(dropped), series
            if series.startswith(("xferd_probe_runs_total", "xferd_probe_last_success")):
                assert "mode=" not in series, series
            if series.startswith(("xferd_pcie_aer_errors_total",
                                  "xferd_pcie_error_source_readable")):
                assert "device=" not in series, series
