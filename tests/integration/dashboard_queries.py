"""Reads the PromQL out of the shipped Grafana dashboards, with template variables
substituted, so that tests run exactly what Grafana would send."""
import json
import re

from deploy_support import DASHBOARD_DIR

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
