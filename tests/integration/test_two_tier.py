"""Past one Prometheus, built from Debian's Prometheus alone: simulated xferd hosts at two
sites, each site scraped by a Prometheus in agent mode (`--enable-feature=agent`: scrape and
remote-write, no storage to query, no rules) that remote-writes to a central Prometheus
(`--web.enable-remote-write-receiver`, no scrape jobs of its own) which loads the shipped
rules, evaluates them and answers the dashboards' queries.

Shown here: a fault injected at each site alerts centrally; the recording rules
and every dashboard query return data centrally; the fleet-peer comparison spans both sites
although neither site alone has enough GPUs for it. The rules are the shipped file with only
`for:` shortened, as in test_fleet.py. Everything is on loopback, on free ports, and torn
down at the end.
"""
import re
import subprocess
import time
import urllib.error

import pytest

from dashboard_queries import DASHBOARDS, load, query_data_report
from deploy_support import RULES_FILE, SOURCE_DIR, require_tool
from fleet_support import (Processes, firing, get_json, serve, shortened_rules, start_daemons,
                           start_prometheus, wait_until)

FAULT = "[[simulate.fault]]\n"
# site -> {host: daemon_config options}; a fault at each site. a-2's link trained down to
# x8, which takes it out of its peers' group: the others are two GPUs at site-a and three at
# site-b, fewer than the 4 a fleet-peer median needs (a GPU and 3 peers), five centrally.
SITES = {
    "site-a": {"a-1": {"devices": 2},
               "a-2": {"simulate": FAULT + 'kind = "downtrain"\ngen = 4\nwidth = 8\n'}},
    "site-b": {"b-1": {"devices": 2},
               "b-2": {"simulate": FAULT + 'kind = "degrade"\nfactor = 0.4\n'}},
}
# a-2 reads below the band its link should carry (Gen4 x16) too.
EXPECTED = {"a-2": {"XferdPcieLinkDowntrained", "XferdBandwidthBelowExpected"},
            "b-2": {"XferdBandwidthBelowExpected"}}


class TwoTier:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = Processes(tmp)

    def start(self, binary, prometheus):
        hosts = {h: o for site in SITES.values() for h, o in site.items()}
        self.targets = start_daemons(self.procs, binary, hosts)
        self.site_of = {h: s for s, site in SITES.items() for h in site}

        rules = self.tmp / "xferd.rules.yml"
        shortened_rules(rules)
        self.central = start_prometheus(
            self.procs, "central", prometheus,
            {"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)]},
            "--web.enable-remote-write-receiver", f"--storage.tsdb.path={self.tmp / 'central'}")
        self.central.wait_ready(self.procs)

        self.agents = {}
        for site, site_hosts in SITES.items():
            self.agents[site] = start_prometheus(self.procs, f"agent-{site}", prometheus, {
                "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                           "external_labels": {"site": site}},
                "scrape_configs": [{"job_name": "xferd", "static_configs": [
                    {"targets": [self.targets[h] for h in site_hosts]}]}],
                "remote_write": [{
                    "url": f"{self.central.base}/api/v1/write",
                    # Ship within a second (the default waits up to 5 s for a batch).
                    "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms",
                                     "max_backoff": "1s"}}],
            }, "--enable-feature=agent", f"--storage.agent.path={self.tmp / ('agent-' + site)}")
        for agent in self.agents.values():
            agent.wait_ready(self.procs)

    def firing(self):
        return firing(self.central.alerts(), {t: n for n, t in self.targets.items()})


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    def hosts_up(t):
        t.procs.check_alive()
        return len(t.central.query('up{job="xferd"} == 1'))

    yield from serve(lambda: TwoTier(tmp_path_factory.mktemp("two-tier")), hosts_up,
                     "every host up at the central Prometheus",
                     ["central", *(f"agent-{s}" for s in SITES)])


def test_the_central_prometheus_holds_every_site_without_scraping(tiers):
    active = tiers.central.query('count by (site) (xferd_device_info)')
    gpus = {r["metric"]["site"]: int(r["value"][1]) for r in active}
    assert gpus == {"site-a": 3, "site-b": 3}, gpus
    targets = get_json(f"{tiers.central.api}/targets")["data"]["activeTargets"]
    assert targets == [], "the central Prometheus scrapes nothing itself"
    # An agent keeps no queryable storage: the data exists centrally only.
    with pytest.raises(urllib.error.HTTPError) as refused:
        tiers.agents["site-a"].query("up")
    print("an agent asked for a query answers", refused.value.code, refused.value.read()[:120])


def test_injected_faults_alert_centrally(tiers):
    last = {}

    def settled():
        tiers.procs.check_alive()
        now = tiers.firing()
        last.clear()
        last.update(now)
        return now if now == EXPECTED else None

    wait_until("each site's fault to alert centrally", settled, 90, 1,
               describe=lambda: {"expected": EXPECTED, "firing": last})
    time.sleep(5)  # and nothing else starts firing
    now = tiers.firing()
    print("firing centrally:", {h: sorted(a) for h, a in now.items()})
    assert now == EXPECTED, now
    for a in tiers.central.alerts():
        host = {t: h for h, t in tiers.targets.items()}[a["labels"]["instance"]]
        assert a["labels"]["alertname"] in EXPECTED[host]
        assert "Check:" in a["annotations"]["description"]


def pinned_h2d_ratios(tiers, what, rule, count):
    """The central Prometheus's pinned h2d series of a recording rule, once there are count."""
    def ratios():
        r = tiers.central.query(rule + '{mode="pinned",direction="h2d"}')
        return r if len(r) == count else None

    return wait_until(what, ratios, 30)


def test_recording_rules_are_evaluated_centrally(tiers):
    ratios = pinned_h2d_ratios(
        tiers, "the band ratio of every GPU",
        "instance_gpu_mode_direction:xferd_bandwidth_over_expected_lower:ratio", 6)
    low = {r["metric"]["instance"] for r in ratios if float(r["value"][1]) < 1}
    # b-2 degraded, a-2 trained down: both below the band their links should carry.
    assert low == {tiers.targets["b-2"], tiers.targets["a-2"]}, low

    # One peer group of five across both sites: neither agent's site has the 4 GPUs a
    # median needs, the central Prometheus has.
    peers = pinned_h2d_ratios(
        tiers, "the fleet-peer ratio of every GPU",
        "instance_gpu_mode_direction_size:xferd_bandwidth_over_fleet_peer_median:ratio", 5)
    site_of = {t: tiers.site_of[h] for h, t in tiers.targets.items()}
    assert {site_of[r["metric"]["instance"]] for r in peers} == set(SITES)
    print("pinned h2d / peer median:", sorted(
        (site_of[r["metric"]["instance"]], r["metric"]["instance"], round(float(r["value"][1]), 3))
        for r in peers))


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_dashboard_query_returns_data_centrally(tiers, name):
    doc = load(name)
    values = {v["name"]: ".+" for v in doc["templating"]["list"]}
    values["datasource"] = "prometheus"
    wait_until("an alert to fire centrally", tiers.firing, 90, 1)
    empty, waiting = query_data_report(tiers.central, [(name, doc, values)])
    if waiting:
        print("waiting for series no daemon exports yet:\n" + "\n".join(waiting))
    assert not empty, "panel queries without data centrally:\n" + "\n".join(empty)


def test_the_documented_configs_are_valid(tmp_path):
    """docs/operations.md shows the agent's and the central server's configuration: both
    pass promtool (the agent's as an agent config)."""
    promtool = require_tool("promtool")
    doc = (SOURCE_DIR / "docs/operations.md").read_text()
    section = doc[doc.index("## Past one Prometheus"):]
    section = section[:section.index("\n## ", 1)]
    agent, central = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert "remote_write" in agent and "rule_files" in central
    checks = [("agent.yml", agent, ["--agent"]),
              ("central.yml", central.replace("/etc/prometheus/rules/xferd.rules.yml",
                                              str(RULES_FILE)), [])]
    for name, text, flags in checks:
        path = tmp_path / name
        path.write_text(text)
        r = subprocess.run([promtool, "check", "config", *flags, str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{name}:\n{r.stdout}{r.stderr}"
