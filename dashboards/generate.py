#!/usr/bin/env python3
"""Writes dashboards/xferd-device.json and dashboards/xferd-fleet.json.

The JSON files are what Grafana imports and what the .deb ships; this script is where
they are edited (panel layout by hand in JSON is error-prone). After a change:
    python3 dashboards/generate.py
tests/integration/test_dashboards.py fails when the JSON and this script disagree.
"""
import json
import pathlib
import sys

DS = {"type": "prometheus", "uid": "${datasource}"}
# Link-bound bandwidth (held against the expected band), as probes::IsLinkBound and the
# rules' link-bound recording rule: pinned, pinned_async, zero_copy, and managed_prefetch
# h2d only; its d2h half is bounded by the host populating the pages it migrates back.
# Both directions at once (bidir) per direction, as the band is. Raw series, not the
# recorded one, so the device dashboard works without the rules loaded.
# %(m)s: the panel's own label matchers.
LINK_BOUND = ('(xferd_bandwidth_bytes_per_second{%(m)s,mode=~"pinned|pinned_async|zero_copy",direction!="bidir"}'
              ' or xferd_bandwidth_bytes_per_second{%(m)s,mode="managed_prefetch",direction="h2d"}'
              ' or xferd_bandwidth_bytes_per_second{%(m)s,mode=~"pinned|pinned_async|zero_copy",direction="bidir"} / 2)')
DEVICE = 'instance=~"$instance",gpu=~"$gpu"'
# The lower bound each link-bound (mode, direction) is held to: its own band where the
# daemon exports one (series with mode and direction labels: managed_prefetch h2d), else the
# GPU's band (no mode label), as the recording rule
# instance_gpu_mode_direction:xferd_expected_bandwidth_lower_bytes_per_second computes it.
MODE_LOWER = ('(max by (instance, gpu, mode, direction) (xferd_expected_bandwidth_bytes_per_second{%(d)s,bound="lower",mode!=""})'
              ' or on (instance, gpu, mode, direction) (0 * min by (instance, gpu, mode, direction) %(lb)s'
              ' + on (instance, gpu) group_left max by (instance, gpu) (xferd_expected_bandwidth_bytes_per_second{%(d)s,bound="lower",mode=""})))')
DEVICE_MODE = DEVICE + ',mode=~"$mode"'
FLEET = 'instance=~"$instance"'
# Rows whose panels read what only the full metrics profile exports (histograms, every
# mode's gauges, the single-host detail): their titles end with this, and their panels say
# so. With [metrics] profile = "fleet" they are empty; every other panel works with both
# (tests/integration/test_fleet.py runs every query against each profile).
FULL_PROFILE = " (full profile)"
FULL_PROFILE_NOTE = (" Needs the full metrics profile ([metrics] profile = \"full\", the "
                     "default): the fleet profile exports no histograms and no gauges of a "
                     "healthy GPU's other modes.")
# Where xferd meets dcgm-exporter: its series carry dcgm-exporter's UUID (xferd_gpu_info),
# the one label both exporters write alike on every node (docs/metrics.md, "Joins with
# dcgm-exporter"). Restricted to the GPUs xferd watches on the chosen instances.
WATCHED = 'on (UUID) xferd_gpu_info{instance=~"$instance"}'
DEVICE_UID = "xferd-device"
FLEET_UID = "xferd-fleet"


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping rows."""

    def __init__(self):
        self.x = self.y = self.row_h = 0
        self.next_id = 1
        self.panels = []

    def add(self, panel, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["id"] = self.next_id
        self.next_id += 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0


def target(expr, legend="", ref="A", instant=False, fmt="time_series"):
    t = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref,
         "range": not instant, "instant": instant, "editorMode": "code"}
    if fmt != "time_series":
        t["format"] = fmt
    return t


def thresholds(*steps):
    """steps: (color, value) with the first value None (the base)."""
    return {"mode": "absolute",
            "steps": [{"color": c, "value": v} for c, v in steps]}


def timeseries(title, description, targets, unit, overrides=(), stack=False, bars=False,
               minimum=0, legend_calcs=("lastNotNull", "min", "mean")):
    custom = {"drawStyle": "bars" if bars else "line", "lineWidth": 1,
              "fillOpacity": 60 if bars else 0, "showPoints": "never" if bars else "auto",
              "spanNulls": True, "axisBorderShow": False, "pointSize": 4,
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    defaults = {"color": {"mode": "palette-classic"}, "custom": custom, "unit": unit}
    if minimum is not None:
        defaults["min"] = minimum
    return {"type": "timeseries", "title": title, "description": description,
            "datasource": DS,
            "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "showLegend": True, "calcs": list(legend_calcs)},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": targets}


def stat(title, description, targets, unit, steps, mappings=(), text_mode="value_and_name",
         decimals=None):
    defaults = {"unit": unit, "thresholds": thresholds(*steps),
                "color": {"mode": "thresholds"}, "mappings": list(mappings)}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {"type": "stat", "title": title, "description": description, "datasource": DS,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "none", "justifyMode": "auto",
                        "orientation": "auto", "textMode": text_mode, "wideLayout": True},
            "targets": targets}


def bargauge(title, description, targets, unit, steps, minimum=0, maximum=None):
    defaults = {"unit": unit, "min": minimum, "thresholds": thresholds(*steps),
                "color": {"mode": "thresholds"}}
    if maximum is not None:
        defaults["max"] = maximum
    return {"type": "bargauge", "title": title, "description": description, "datasource": DS,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"displayMode": "gradient", "orientation": "horizontal",
                        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "showUnfilled": True, "valueMode": "color", "namePlacement": "left",
                        "sizing": "auto", "minVizHeight": 16, "maxVizHeight": 300},
            "targets": targets}


def table(title, description, targets, unit="none", steps=(("green", None),), hide=(),
          mappings=(), links=(), sort_by=None, color_cell=True):
    defaults = {"unit": unit, "thresholds": thresholds(*steps), "mappings": list(mappings),
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False}}
    overrides = []
    if color_cell:
        overrides.append({"matcher": {"id": "byName", "options": "Value"},
                          "properties": [{"id": "custom.cellOptions",
                                          "value": {"type": "color-background"}}]})
    if links:
        overrides.append({"matcher": {"id": "byName", "options": "instance"},
                          "properties": [{"id": "links", "value": list(links)}]})
    panel = {"type": "table", "title": title, "description": description, "datasource": DS,
             "fieldConfig": {"defaults": defaults, "overrides": overrides},
             "options": {"showHeader": True, "cellHeight": "sm",
                         "footer": {"show": False, "reducer": ["sum"], "countRows": False}},
             "targets": targets,
             "transformations": [{"id": "organize", "options": {
                 "excludeByName": {name: True for name in ("Time", "__name__", "job", *hide)},
                 "renameByName": {}}}]}
    if sort_by:
        panel["options"]["sortBy"] = [{"displayName": sort_by, "desc": False}]
    return panel


def worst_table(title, description, expr, steps, link):
    """The 10 lowest of the ratio `expr` (percent), lowest first, each cell coloured by steps;
    its instance cells open `link`."""
    return table(title, description,
                 [target("bottomk(10, %s)" % expr, instant=True, fmt="table")],
                 unit="percentunit", steps=steps, links=[link], sort_by="Value")


def datasource_variable():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "includeAll": False,
            "multi": False, "options": [], "refresh": 1, "regex": "", "skipUrlSync": False}


def query_variable(name, label, query, multi=True, include_all=True):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query,
            "query": {"qryType": 1, "query": query,
                      "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "current": {}, "hide": 0, "includeAll": include_all,
            "allValue": ".+" if include_all else None, "multi": multi, "options": [],
            "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1}


def alert_annotation(selector):
    return {"name": "xferd alerts", "datasource": DS, "enable": True, "iconColor": "red",
            "expr": 'ALERTS{alertname=~"Xferd.*",alertstate="firing",%s}' % selector,
            "step": "60s", "titleFormat": "{{alertname}}",
            "tagKeys": "gpu,mode,direction", "useValueForTime": False}


def dashboard(uid, title, description, panels, variables, annotations, links):
    return {
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
             "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
             "name": "Annotations & Alerts", "type": "dashboard"}, *annotations]},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": links,
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": 39,
        "tags": ["xferd", "gpu", "pcie"],
        "templating": {"list": variables},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def device_dashboard():
    lay = Layout()
    bw = "xferd_bandwidth_bytes_per_second{%s}" % DEVICE_MODE
    lower = 'max by (instance, gpu) (xferd_expected_bandwidth_bytes_per_second{%s,bound="lower",mode=""})' % DEVICE
    upper = 'max by (instance, gpu) (xferd_expected_bandwidth_bytes_per_second{%s,bound="upper",mode=""})' % DEVICE
    link_bound = LINK_BOUND % {"m": DEVICE_MODE}
    mode_lower = MODE_LOWER % {"d": DEVICE, "lb": link_bound}

    lay.row("Bandwidth")
    lay.add(timeseries(
        "Bandwidth by mode and direction",
        "Median bandwidth of each probe (one point per cycle). The shaded band is what the "
        "narrowest PCIe link on the GPU's path should give; red points are link-bound "
        "readings below its lower bound.",
        [target(bw, "gpu{{gpu}} {{mode}} {{direction}} {{size}}", "A"),
         target(upper, "expected upper", "B"),
         target(lower, "expected lower", "C"),
         target('min by (instance, gpu, mode, direction) %s < %s' % (link_bound, mode_lower),
                "below band: gpu{{gpu}} {{mode}} {{direction}}", "D")],
        "Bps",
        overrides=[
            {"matcher": {"id": "byName", "options": "expected upper"},
             "properties": [{"id": "custom.fillBelowTo", "value": "expected lower"},
                            {"id": "custom.fillOpacity", "value": 12},
                            {"id": "color", "value": {"mode": "fixed", "fixedColor": "green"}},
                            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]},
            {"matcher": {"id": "byName", "options": "expected lower"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "green"}},
                            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]},
            {"matcher": {"id": "byRegexp", "options": "^below band.*"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                            {"id": "custom.drawStyle", "value": "points"},
                            {"id": "custom.pointSize", "value": 9},
                            {"id": "custom.showPoints", "value": "always"}]}]),
        16, 10)
    lay.add(bargauge(
        "Link-bound modes against the band's lower bound",
        "Slowest size of each link-bound mode divided by the lower bound of the band it is "
        "held to (managed_prefetch h2d has its own, 0.8 x the GPU's). Red below 100%: the "
        "link delivers less than it should.",
        [target('min by (instance, gpu, mode, direction) %s / %s' % (link_bound, mode_lower),
                "gpu{{gpu}} {{mode}} {{direction}}", instant=True)],
        "percentunit", (("red", None), ("green", 1.0)), maximum=1.5),
        8, 10)

    lay.row("Latency" + FULL_PROFILE)
    lay.add(timeseries(
        "Transfer latency p50 / p99 / p99.9",
        "Quantiles of single-transfer durations from the xferd_transfer_duration_seconds "
        "histograms (interpolated within buckets). The tail is where contention shows first."
        + FULL_PROFILE_NOTE,
        [target('histogram_quantile(%s, sum by (le, gpu, mode, direction, size) '
                '(rate(xferd_transfer_duration_seconds_bucket{%s}[$__rate_interval])))'
                % (q, DEVICE_MODE), "p%s gpu{{gpu}} {{mode}} {{direction}} {{size}}" % label, ref)
         for q, label, ref in ((0.5, "50", "A"), (0.99, "99", "B"), (0.999, "99.9", "C"))],
        "s", minimum=None),
        24, 10)
    heat = {"type": "heatmap", "title": "Latency heatmap: $mode",
            "description": "Distribution of single-transfer durations per mode (both "
                           "directions, every size) from the histogram buckets."
                           + FULL_PROFILE_NOTE,
            "datasource": DS, "repeat": "mode", "repeatDirection": "h", "maxPerRow": 3,
            "fieldConfig": {"defaults": {"custom": {"scaleDistribution": {"type": "linear"},
                                                    "hideFrom": {"legend": False, "tooltip": False, "viz": False}}},
                            "overrides": []},
            "options": {"calculate": False, "cellGap": 1,
                        "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64,
                                  "exponent": 0.5, "fill": "dark-orange", "reverse": False,
                                  "scale": "exponential"},
                        "filterValues": {"le": 1e-9}, "legend": {"show": True},
                        "rowsFrame": {"layout": "auto"},
                        "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
                        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": "s"},
                        "cellValues": {"unit": "short"}, "showValue": "never",
                        "exemplars": {"color": "rgba(255,0,255,0.7)"}},
            "targets": [target('sum by (le) (increase(xferd_transfer_duration_seconds_bucket{%s}[$__rate_interval]))'
                               % (DEVICE + ',mode=~"$mode"'), "{{le}}", fmt="heatmap")]}
    lay.add(heat, 8, 9)

    lay.row("Memory paths" + FULL_PROFILE)
    lay.add(timeseries(
        "Pinned over pageable speedup",
        "pinned / pageable bandwidth, per direction. Usually 2-4x on a discrete GPU (pageable "
        "copies are staged through a pinned bounce buffer) and about 1x on an integrated one. "
        "A sudden change points at the host side: driver, NUMA, hugepages." + FULL_PROFILE_NOTE,
        [target('min by (gpu, direction) (xferd_bandwidth_bytes_per_second{%s,mode="pinned"})'
                ' / on (gpu, direction) min by (gpu, direction) (xferd_bandwidth_bytes_per_second{%s,mode="pageable"})'
                % (DEVICE, DEVICE), "gpu{{gpu}} {{direction}}")],
        "suffix:x"),
        12, 8)
    lay.add(timeseries(
        "Copy/compute overlap (pinned_async)",
        "1 = copies fully hidden behind compute on other streams, 0 = serialized. Below ~0.5 "
        "the async path buys nothing over plain pinned copies." + FULL_PROFILE_NOTE,
        [target("xferd_overlap_ratio{%s}" % DEVICE, "gpu{{gpu}}")],
        "percentunit"),
        12, 8)
    lay.row("PCIe link")
    lay.add(timeseries(
        "PCIe link generation and width (read while probing)",
        "The GPU's own link (current, max) and the narrowest link on its path to the root "
        "port (narrowest). current below max, or narrowest below current, = a link trained "
        "down or a narrow bridge (reseat, riser, BIOS, link errors).",
        [target("max by (gpu, state) (xferd_pcie_link_generation{%s})" % DEVICE, "gpu{{gpu}} Gen {{state}}", "A"),
         target("max by (gpu, state) (xferd_pcie_link_width{%s})" % DEVICE, "gpu{{gpu}} x width {{state}}", "B")],
        "none", legend_calcs=("lastNotNull", "min")),
        24, 8)

    lay.add(timeseries(
        "PCIe link errors per minute",
        "Replays the GPU counted on its own link (NVML) and the AER errors each device on "
        "its path reported, by class, per minute. A link that keeps replaying trains down "
        "next: XferdPcieLinkErrorsRising fires past 8 a minute (DCGM's health-watch rate) "
        "for 15 minutes, XferdPcieUncorrectableErrors on any nonfatal or fatal error. A "
        "source xferd cannot read (no AER on a VM) has no line here; the table beside says "
        "which.",
        [target("60 * max by (gpu) (rate(xferd_pcie_replays_total{%s}[$__rate_interval]))" % DEVICE,
                "gpu{{gpu}} replays (NVML)", "A"),
         target("60 * max by (gpu, device, class) "
                "(rate(xferd_pcie_aer_errors_total{%s}[$__rate_interval]))" % DEVICE,
                "gpu{{gpu}} {{device}} {{class}}", "B")],
        "none", legend_calcs=("lastNotNull", "max")),
        14, 8)
    lay.add(table(
        "Link-error sources",
        "Whether xferd reads each source of link errors on the GPU's path: the AER counters "
        "of every device (the GPU, its switch's ports, the root port) and NVML's replay "
        "counter. no = missing (no AER capability, a VM) or not trusted (an odd file, a "
        "count that went back): the log says which, once.",
        [target("max by (gpu, device, source) (xferd_pcie_error_source_readable{%s})" % DEVICE,
                instant=True, fmt="table")],
        mappings=[{"type": "value", "options": {"0": {"text": "no", "color": "orange", "index": 0},
                                                "1": {"text": "yes", "color": "green", "index": 1}}}]),
        10, 8)
    lay.add(timeseries(
        "PCIe link transitions and time below capability, last 10 minutes",
        "What the link watch saw between probes on every link of the GPU's path (read every 2 "
        "s): transitions (a width changing, or a speed changing while the GPU moved data; "
        "a speed drop while idle is power saving and not counted) and the seconds a link ran "
        "below what it can train to. At 4 transitions or 60 s in 10 minutes the link flaps: "
        "the GPU is DEGRADED with the cause link_flapping, and XferdPcieLinkFlapping fires. "
        "A probe reading the link for a moment a minute misses all of this.",
        [target("max by (gpu) (increase(xferd_pcie_link_transitions_total{%s}[10m]))" % DEVICE,
                "gpu{{gpu}} transitions", "A"),
         target("max by (gpu) (increase(xferd_pcie_link_reduced_seconds_total{%s}[10m]))" % DEVICE,
                "gpu{{gpu}} seconds below capability", "B")],
        "none", legend_calcs=("lastNotNull", "max")),
        24, 8)

    lay.row("Host aggregates")
    lay.add(timeseries(
        "Aggregate bandwidth of each concurrent group",
        "What every GPU of a group (the whole host, or the GPUs behind one shared uplink) "
        "moved together while all of them copied at once (pinned), with the lower bound of "
        "what the group's shared path should carry (dashed). XferdHostAggregateBelowExpected "
        "fires when an h2d or d2h aggregate stays under it for 30 minutes.",
        [target('max by (group, direction) (xferd_host_aggregate_bandwidth_bytes_per_second{instance=~"$instance"})',
                "{{group}} {{direction}}", "A"),
         target('max by (group) (xferd_host_aggregate_expected_bandwidth_bytes_per_second{instance=~"$instance",bound="lower"})',
                "{{group}} expected lower", "B")],
        "Bps",
        overrides=[{"matcher": {"id": "byRegexp", "options": ".* expected lower$"},
                    "properties": [{"id": "custom.lineStyle",
                                    "value": {"fill": "dash", "dash": [10, 10]}}]}]),
        12, 9)
    lay.add(bargauge(
        "Concurrent over solo bandwidth, per GPU and group",
        "What each GPU got while its whole group moved data, over what it gets alone "
        "(pinned, same direction). GPUs behind one uplink share it by design: 0.5 each for "
        "two GPUs on an uplink as wide as their own links. Far below that, with the group's "
        "aggregate inside its band, the GPU loses out to its neighbours (NUMA placement, "
        "root port).",
        [target('max by (gpu, direction, group) (xferd_concurrent_bandwidth_bytes_per_second{%s})'
                ' / on (gpu, direction) group_left max by (gpu, direction) '
                '(xferd_bandwidth_bytes_per_second{%s,mode="pinned"})' % (DEVICE, DEVICE),
                "gpu{{gpu}} {{direction}} {{group}}", instant=True)],
        "percentunit", (("red", None), ("orange", 0.5), ("green", 0.8)), maximum=1.2),
        12, 9)
    lay.add(table(
        "Concurrent groups and the links they share",
        "The groups xferd probes at once on this host: every GPU (host), and each set of "
        "GPUs behind one upstream port (uplink_<bus id>), with the link they share. The "
        "diagnosis table names shared_uplink when sharing explains a low figure.",
        [target('xferd_concurrent_group_info{instance=~"$instance"}', instant=True, fmt="table")],
        hide=("Value", "instance"), color_cell=False),
        24, 6)

    lay.row("Probes")
    lay.add(timeseries(
        "Probe results",
        "Probes per result in each interval: error and timeout readings are missing from the "
        "bandwidth panels; skipped_busy means the GPU was busy with real work and xferd "
        "stayed out of its way. The fleet metrics profile counts them over all modes (no "
        "mode label: whichever modes are chosen).",
        [target("sum by (mode, result) (increase(xferd_probe_runs_total{%s,mode=~\"$mode|\"}[$__rate_interval]))" % DEVICE,
                "{{mode}} {{result}}")],
        "short", stack=True, bars=True, legend_calcs=("sum",),
        overrides=[{"matcher": {"id": "byRegexp", "options": ".* %s$" % result},
                    "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]}
                   for result, color in (("error", "red"), ("timeout", "orange"),
                                         ("skipped_busy", "blue"), ("unsupported", "text"))]),
        12, 8)
    lay.add(stat(
        "Since last successful probe",
        "Age of the newest successful probe per GPU. XferdProbesStale fires past 15 minutes.",
        [target("time() - max by (gpu) (xferd_probe_last_success_timestamp_seconds{%s})" % DEVICE,
                "gpu{{gpu}}", instant=True)],
        "s", (("green", None), ("orange", 300), ("red", 900))),
        4, 8)
    lay.add(timeseries(
        "Probe cost: GPU duty cycle and cycle duration",
        "Share of device time spent probing (xferd_probe_device_seconds_total; the config "
        "caps it with max_duty_cycle) and the wall time of the last cycle, all GPUs.",
        [target("rate(xferd_probe_device_seconds_total{%s}[$__rate_interval])" % DEVICE,
                "duty cycle gpu{{gpu}}", "A"),
         target('max by (instance) (xferd_cycle_duration_seconds{instance=~"$instance"})',
                "cycle duration", "B")],
        "percentunit",
        overrides=[{"matcher": {"id": "byName", "options": "cycle duration"},
                    "properties": [{"id": "unit", "value": "s"},
                                   {"id": "custom.axisPlacement", "value": "right"}]}]),
        8, 8)
    lay.add(table(
        "Likely causes (diagnosis)",
        "What the daemon sees that explains a low reading. YES rows name the cause; "
        "`xferd probe` on the host prints the detail.",
        [target("max by (gpu, cause) (xferd_diagnosis{%s})" % DEVICE, instant=True, fmt="table")],
        mappings=[{"type": "value", "options": {"0": {"text": "no", "color": "green", "index": 0},
                                                "1": {"text": "YES", "color": "red", "index": 1}}}]),
        12, 8)
    lay.add(table(
        "Devices",
        "What xferd found on this host.",
        [target("xferd_device_info{%s}" % DEVICE, instant=True, fmt="table")],
        hide=("Value", "instance"), color_cell=False),
        12, 8)

    return dashboard(
        DEVICE_UID, "xferd / device",
        "Host<->GPU transfer bandwidth, latency and link state of one host's GPUs, from xferd.",
        lay.panels,
        [datasource_variable(),
         query_variable("instance", "Instance", "label_values(xferd_device_info, instance)",
                        multi=False, include_all=False),
         query_variable("gpu", "GPU", 'label_values(xferd_device_info{instance=~"$instance"}, gpu)'),
         query_variable("mode", "Mode",
                        'label_values(xferd_bandwidth_bytes_per_second{instance=~"$instance"}, mode)')],
        [alert_annotation('instance=~"$instance"')],
        [{"title": "Fleet", "type": "link", "url": "/d/%s/xferd-fleet?${datasource:queryparam}" % FLEET_UID,
          "icon": "dashboard", "keepTime": True, "includeVars": False, "asDropdown": False,
          "targetBlank": False, "tags": [], "tooltip": "All devices"}])


def fleet_dashboard():
    lay = Layout()
    ratio = "instance_gpu_mode_direction:xferd_bandwidth_over_expected_lower:ratio{%s}" % (FLEET + ',mode=~"$mode"')
    peer_ratio = ("instance_gpu_mode_direction_size:xferd_bandwidth_over_fleet_peer_median:ratio{%s}"
                  % (FLEET + ',mode=~"$mode"'))
    aggregate_ratio = "instance_group_direction:xferd_host_aggregate_over_expected_lower:ratio{%s}" % FLEET
    device_link = {"title": "Open device dashboard",
                   "url": "/d/%s/xferd-device?var-instance=${__data.fields.instance}"
                          "&var-gpu=${__data.fields.gpu}&${datasource:queryparam}&${__url_time_range}"
                          % DEVICE_UID}
    host_link = {"title": "Open device dashboard",
                 "url": "/d/%s/xferd-device?var-instance=${__data.fields.instance}"
                        "&${datasource:queryparam}&${__url_time_range}" % DEVICE_UID}

    lay.row("Fleet now")
    for title, desc, expr, steps in (
        ("GPUs monitored", "GPUs reported by xferd_device_info.",
         "count(xferd_device_info{%s}) or vector(0)" % FLEET, (("blue", None),)),
        ("Below expected band", "GPUs where a link-bound mode reads below the band's lower "
         "bound and the daemon's verdict is degraded (what XferdBandwidthBelowExpected needs).",
         "count(count by (instance, gpu) ((%s < 1) and on (instance, gpu, mode, direction) "
         "(max by (instance, gpu, mode, direction) (xferd_bandwidth_degraded{%s}) == 1))) or vector(0)"
         % (ratio, FLEET), (("green", None), ("red", 1))),
        ("Degraded (any mode)", "GPUs with any (mode, direction) the daemon calls degraded: "
         "below band or drifted below its own baseline.",
         "count(max by (instance, gpu) (xferd_bandwidth_degraded{%s}) == 1) or vector(0)" % FLEET,
         (("green", None), ("orange", 1))),
        ("Links downtrained", "GPUs whose narrowest PCIe link runs below its maximum.",
         "count(instance_gpu:xferd_pcie_link_downtrained:bool{%s} == 1) or vector(0)" % FLEET,
         (("green", None), ("red", 1))),
        ("Below fleet peers", "GPUs with a link-bound reading under 0.9 of the median of "
         "their peers (same model, same narrowest link) right now; "
         "XferdBandwidthBelowFleetPeers needs 30 minutes of it and a reading inside the band.",
         "count(min by (instance, gpu) (%s) < 0.9) or vector(0)" % peer_ratio,
         (("green", None), ("orange", 1))),
        ("Host groups below expected", "Concurrent groups (a host's GPUs, or those behind "
         "one uplink) whose h2d or d2h aggregate is under the lower bound of their shared "
         "path's band.",
         "count(count by (instance, group) (%s < 1)) or vector(0)" % aggregate_ratio,
         (("green", None), ("orange", 1))),
        ("Targets down", "xferd endpoints Prometheus cannot scrape.",
         'count(up{job=~".*xferd.*",%s} == 0) or vector(0)' % FLEET, (("green", None), ("red", 1))),
        ("Firing xferd alerts", "Alerts from xferd.rules.yml firing now.",
         'count(ALERTS{alertname=~"Xferd.*",alertstate="firing",%s}) or vector(0)' % FLEET,
         (("green", None), ("orange", 1))),
    ):
        lay.add(stat(title, desc, [target(expr, title, instant=True)], "none", steps,
                     text_mode="value", decimals=0), 3, 4)

    lay.row("Distribution across the fleet")
    lay.add({"type": "histogram", "title": "Bandwidth / band lower bound, all GPUs",
             "description": "How many (GPU, mode, direction) read at each multiple of their "
                            "band's lower bound right now. A healthy fleet sits at 1.0-1.3; a "
                            "tail under 1.0 is the devices to look at.",
             "datasource": DS,
             "fieldConfig": {"defaults": {"unit": "percentunit",
                                          "color": {"mode": "palette-classic"},
                                          "custom": {"fillOpacity": 80, "lineWidth": 1,
                                                     "gradientMode": "none"}},
                             "overrides": []},
             "options": {"bucketCount": 30, "combine": True,
                         "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False}},
             "targets": [target(ratio, "{{instance}} gpu{{gpu}} {{mode}} {{direction}}",
                                instant=True, fmt="table")]},
            12, 9)
    lay.add(timeseries(
        "Fleet spread of bandwidth / band lower bound",
        "Per mode and direction: the worst GPU, the 5th percentile and the median of the "
        "fleet, as multiples of each GPU's own band lower bound (1.0 = at the bound).",
        [target("min by (mode, direction) (%s)" % ratio, "min {{mode}} {{direction}}", "A"),
         target("quantile by (mode, direction) (0.05, %s)" % ratio, "p5 {{mode}} {{direction}}", "B"),
         target("quantile by (mode, direction) (0.5, %s)" % ratio, "median {{mode}} {{direction}}", "C")],
        "percentunit", minimum=None, legend_calcs=("lastNotNull", "min")),
        12, 9)

    lay.row("Worst devices")
    lay.add(worst_table(
        "Worst 10 GPUs (slowest link-bound mode / band lower bound)",
        "bottomk over the fleet; red below 100%. Click an instance for its device dashboard.",
        "min by (instance, gpu) (%s)" % ratio, (("red", None), ("green", 1.0)), device_link),
        12, 9)
    lay.add(bargauge(
        "Worst 10 by drift from own baseline",
        "bottomk of bandwidth / the GPU's own learned baseline, any mode.",
        [target("bottomk(10, min by (instance, gpu) (instance_gpu_mode_direction:xferd_bandwidth_over_baseline:ratio{%s}))"
                % (FLEET + ',mode=~"$mode"'), "{{instance}} gpu{{gpu}}", instant=True)],
        "percentunit", (("red", None), ("orange", 0.8), ("green", 0.95)), maximum=1.2),
        12, 9)
    lay.add(table(
        "Downtrained links",
        "GPUs whose narrowest PCIe link is below its maximum generation or width (empty is good).",
        [target('max by (instance, gpu, state) (xferd_pcie_link_generation{%s}) and on (instance, gpu) '
                '(instance_gpu:xferd_pcie_link_downtrained:bool == 1)' % FLEET, "", "A", instant=True, fmt="table"),
         target('max by (instance, gpu, state) (xferd_pcie_link_width{%s}) and on (instance, gpu) '
                '(instance_gpu:xferd_pcie_link_downtrained:bool == 1)' % FLEET, "", "B", instant=True, fmt="table")],
        links=[device_link], color_cell=False),
        12, 9)
    lay.add(table(
        "Probe failure ratio (10 min), worst 10",
        "Share of attempted probes ending in error or timeout per GPU and mode.",
        [target("topk(10, instance_gpu_mode:xferd_probe_runs_failed:ratio_rate10m{%s})" % FLEET,
                instant=True, fmt="table")],
        unit="percentunit", steps=(("green", None), ("orange", 0.01), ("red", 0.1)),
        links=[device_link], sort_by=None),
        12, 9)
    lay.row("Fleet peers")
    lay.add(worst_table(
        "Slowest 10 against their fleet peers (bandwidth / peer median)",
        "Each GPU's slowest link-bound (mode, direction, size) over the median of its peer "
        "group: the same GPU model on the same narrowest link, at least 3 peers. Red under "
        "90%: XferdBandwidthBelowFleetPeers after 30 minutes, unless the reading is below the "
        "band (then XferdBandwidthBelowExpected says more).",
        "min by (instance, gpu, peer_group) (%s)" % peer_ratio, (("red", None), ("green", 0.9)),
        device_link),
        12, 9)
    lay.add(timeseries(
        "Slowest GPU of each peer group, against the group's median",
        "Per peer group, mode and direction: the lowest bandwidth / peer median in the "
        "group over time. A line that stays under 0.9 is a GPU its peers outrun.",
        [target("min by (peer_group, mode, direction) (%s)" % peer_ratio,
                "{{peer_group}} {{mode}} {{direction}}")],
        "percentunit", minimum=None, legend_calcs=("lastNotNull", "min")),
        12, 9)

    lay.row("Host aggregates")
    lay.add(worst_table(
        "Concurrent groups, worst 10 (aggregate / expected lower bound)",
        "What the GPUs of a group moved together over the lower bound of their shared path's "
        "band, h2d and d2h. Red under 100%: XferdHostAggregateBelowExpected after 30 minutes.",
        aggregate_ratio, (("red", None), ("green", 1.0)), host_link),
        12, 9)
    lay.add(worst_table(
        "GPUs losing most to their neighbours (concurrent / solo), worst 10",
        "What a GPU got while its group moved data at once, over what it gets alone. GPUs "
        "behind one shared uplink get their share of it by design; the device dashboard "
        "shows the groups and their links.",
        "instance_gpu_direction_group:xferd_concurrent_over_solo:ratio{%s}" % FLEET,
        (("red", None), ("orange", 0.5), ("green", 0.8)), device_link),
        12, 9)

    lay.row("Beside dcgm-exporter")
    dcgm = table(
        "xferd's verdict beside DCGM's PCIe counters",
        "Per GPU xferd watches, keyed by UUID as dcgm-exporter labels its series: xferd's "
        "verdict (1: some mode and direction degraded; UUID:xferd_gpu_degraded:max), DCGM's "
        "PCIe replay counter and link generation, and the generation xferd read while "
        "probing. Empty DCGM columns: no dcgm-exporter scraped with the default counters "
        "plus DCGM_FI_DEV_PCIE_LINK_GEN. A verdict of 1 with replays rising points at the "
        "link (reseat); with no replays, at the host (NUMA, IOMMU).",
        [target("max by (UUID, Hostname) (UUID:xferd_gpu_degraded:max and %s)" % WATCHED,
                ref="A", instant=True, fmt="table"),
         target("max by (UUID) (DCGM_FI_DEV_PCIE_REPLAY_COUNTER and %s)" % WATCHED,
                ref="B", instant=True, fmt="table"),
         target("max by (UUID) (DCGM_FI_DEV_PCIE_LINK_GEN and %s)" % WATCHED,
                ref="C", instant=True, fmt="table"),
         target('max by (UUID) (xferd_pcie_link_generation{instance=~"$instance",state="current"}'
                ' * on (instance, gpu) group_left (UUID) xferd_gpu_info)',
                ref="D", instant=True, fmt="table")],
        mappings=[{"type": "value", "options": {"0": {"text": "ok", "color": "green", "index": 0},
                                                "1": {"text": "DEGRADED", "color": "red", "index": 1}}}],
        color_cell=False)
    # One row per UUID: the four queries joined on it, their values named.
    dcgm["transformations"] = [
        {"id": "joinByField", "options": {"byField": "UUID", "mode": "outer"}},
        {"id": "organize", "options": {
            "excludeByName": {"Time": True, "Time 1": True, "Time 2": True, "Time 3": True,
                              "Time 4": True},
            "renameByName": {"Value #A": "xferd verdict",
                             "Value #B": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                             "Value #C": "DCGM_FI_DEV_PCIE_LINK_GEN",
                             "Value #D": "xferd link generation"}}}]
    dcgm["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": "xferd verdict"},
         "properties": [{"id": "custom.cellOptions", "value": {"type": "color-background"}}]}]
    lay.add(dcgm, 24, 8)

    lay.row("Alerts")
    lay.add(table(
        "Firing xferd alerts",
        "Alerts from xferd.rules.yml firing now.",
        [target('ALERTS{alertname=~"Xferd.*",alertstate="firing",%s}' % FLEET, instant=True, fmt="table")],
        hide=("Value", "alertstate"), links=[device_link], color_cell=False),
        24, 8)

    return dashboard(
        FLEET_UID, "xferd / fleet",
        "Every GPU xferd watches: who is below its band, how the fleet spreads, the worst "
        "devices, downtrained links, GPUs slower than their fleet peers, hosts whose GPUs "
        "together move less than their shared paths should carry.",
        lay.panels,
        [datasource_variable(),
         query_variable("instance", "Instance", "label_values(xferd_device_info, instance)"),
         query_variable("mode", "Mode", "label_values(xferd_bandwidth_bytes_per_second, mode)")],
        [alert_annotation('instance=~"$instance"')],
        [{"title": "Device", "type": "dashboards", "tags": ["xferd"], "asDropdown": True,
          "icon": "external link", "includeVars": False, "keepTime": True, "targetBlank": False,
          "tooltip": "", "url": ""}])


def render():
    return {
        "xferd-device.json": device_dashboard(),
        "xferd-fleet.json": fleet_dashboard(),
    }


def serialize(doc):
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def main():
    out = pathlib.Path(__file__).resolve().parent
    for name, doc in render().items():
        (out / name).write_text(serialize(doc))
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
