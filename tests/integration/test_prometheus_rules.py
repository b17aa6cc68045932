"""The shipped Prometheus rules and example config pass promtool, and the rule unit tests
cover a firing and a quiet case for every alert."""
import subprocess

import yaml

from deploy_support import RULES_FILE, RULES_TEST_FILE, SOURCE_DIR, require_tool


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


def test_promtool_test_rules():
    r = promtool("test", "rules", str(RULES_TEST_FILE))
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
            "XferdPcieUncorrectableErrors"} <= set(alert_names())


def test_every_recording_rule_is_checked_by_a_unit_test():
    # Each recorded series is evaluated by name in some promql_expr_test, or read by an
    # alert that a unit test fires.
    rules = yaml.safe_load(RULES_FILE.read_text())
    tests = yaml.safe_load(RULES_TEST_FILE.read_text())
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
                    f"no promtool case evaluates {r['record']}"


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


def test_every_alert_fires_and_stays_quiet_in_the_unit_tests():
    tests = yaml.safe_load(RULES_TEST_FILE.read_text())
    fired, quiet = set(), set()
    for case in tests["tests"]:
        for t in case.get("alert_rule_test", []):
            (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
    for name in alert_names():
        assert name in fired, f"no promtool case where {name} fires"
        assert name in quiet, f"no promtool case where {name} must stay quiet"
