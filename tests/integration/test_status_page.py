"""The status page (/) in a real browser, and `xferd status` in a terminal, against real
daemons on the simulated device, healthy and with a degrade fault applied by SIGHUP.

The browser is Debian's headless Chromium (`deploy/install-deps.sh --test` installs it; the
browser tests skip, saying so, where it is missing). It loads the page from the daemon,
and the test reads the DOM as Chromium built it (`--dump-dom`): the verdict of each GPU,
one plot per GPU with its band and a point per reading, the fault's causes. Its screenshots
(`--screenshot`) are kept as test artifacts: BUILD_DIR/test-artifacts/status_page/
healthy.png and degraded.png, beside the DOM of each (healthy.html, degraded.html).
"""
import html.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from xferd_harness import BINARY, SOURCE_DIR, sim_config, stable_status

DEGRADE = {"kind": "degrade", "factor": 0.5, "device": 0}
BAND = ('"4MiB"',)  # held to the band: a degrade fault is below band from its first reading
ARTIFACTS = Path(os.environ.get("XFERD_BUILD_DIR") or SOURCE_DIR / "build") / "test-artifacts" \
    / "status_page"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def reload(d, **config):
    t = len(d.log())
    d.write_config(sim_config(**config))
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied", start=t)


def hold_still(d, **config):
    """Reload with a one-hour interval and wait until the document holds still: the last
    cycle on the old interval done and no confirmation round pending (the scheduler keeps
    the sleep it started, so a later reload to a shorter interval would wait for it)."""
    t = len(d.log())
    reload(d, **dict(config, interval="1h"))
    d.wait_log(r"next in 3600", start=t)
    last = None

    def still():
        nonlocal last
        now = stable_status(status(d))
        was, last = last, now
        return was == now

    d.wait_for(lambda: still() or time.sleep(1), 60, "the document to hold still")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the browser ------------------------------------------------------------------------------

def chromium(url, *args):
    """Chromium's output for `url` (headless, as root needs it, a profile of its own)."""
    with tempfile.TemporaryDirectory(prefix="xferd-chromium-") as profile:
        r = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args, url],
            capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class Dom(html.parser.HTMLParser):
    """What a test asks of the page as Chromium rendered it: per GPU section its verdict,
    text, plots, band shapes and points."""

    def __init__(self, text):
        super().__init__()
        self.gpus = {}        # "gpu0" -> {"verdict", "text", "svgs", "bands", "points", "low"}
        self.overview = ""    # the text of the table of GPUs at the top
        self.incidents = ""   # the text of the incident log's table
        self._open = []       # (tag, section id or None, table class or None)
        self.feed(text)

    def _where(self):
        section = next((s for _, s, _ in reversed(self._open) if s), None)
        table = next((t for _, _, t in reversed(self._open) if t), None)
        return section, table

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        section = a.get("id") if tag == "section" and "gpu" in classes else None
        table = classes[0] if tag == "table" and classes else None
        if section:
            self.gpus[section] = {"verdict": a.get("data-verdict"), "text": "", "svgs": 0,
                                  "bands": 0, "band_lower": 0, "points": 0, "low": 0,
                                  "causes": []}
        # HTML's void elements have no end tag; SVG's shapes do in Chromium's DOM.
        void = tag in ("br", "meta", "hr", "img", "input", "link", "wbr")
        if not void:
            self._open.append((tag, section, table))
        gpu, _ = self._where()
        if gpu is None and section is None:
            return
        g = self.gpus[gpu or section]
        if tag == "svg" and "plot" in classes:
            g["svgs"] += 1
        elif tag == "rect" and "band" in classes:
            g["bands"] += 1
        elif tag == "line" and "band-lower" in classes:
            g["band_lower"] += 1
        elif tag == "circle" and "point" in classes:
            g["points"] += 1
            g["low"] += "low" in classes

    def handle_endtag(self, tag):
        if any(open_tag == tag for open_tag, _, _ in self._open):
            while self._open.pop()[0] != tag:
                pass

    def handle_data(self, data):
        gpu, table = self._where()
        if gpu:
            self.gpus[gpu]["text"] += data
            # A cause's name: the strong text of its row in the GPU's table of causes.
            if table == "causes" and self._open and self._open[-1][0] == "strong":
                self.gpus[gpu]["causes"].append(data.strip())
        if table == "overview":
            self.overview += data
        if table == "incidents":
            self.incidents += data


def look(d, name):
    """The page as Chromium renders it: its DOM (kept), read; and a screenshot (kept)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    url = d.url("/")
    dom = chromium(url, "--dump-dom")
    (ARTIFACTS / f"{name}.html").write_text(dom)
    shot = ARTIFACTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    chromium(url, f"--screenshot={shot}", "--window-size=1280,2200")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, f"{shot}: no screenshot"
    print(f"\n{name}: {shot}")
    return Dom(dom)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: the status page's browser test "
                    "needs Debian's chromium package (deploy/install-deps.sh --test)")
def test_the_page_in_a_browser_shows_verdicts_plots_and_the_faults_cause(daemon):
    config = dict(interval="300ms", devices=2, sizes=BAND)
    d = daemon(sim_config(**config)).start().wait_ready()
    d.wait_for(lambda: status(d)["daemon"]["cycles"] >= 4 and
               all(g["verdict"] == "ok" for g in status(d)["gpus"]), 60, "4 cycles, both ok")

    healthy = look(d, "healthy")
    assert set(healthy.gpus) == {"gpu0", "gpu1"}, healthy.gpus.keys()
    for name, g in healthy.gpus.items():
        assert g["verdict"] == "ok", (name, g)
        assert "within band" in g["text"]
        # One plot per GPU: the band (its range and its lower bound) and a point per reading
        # of its two headline series (pinned h2d, d2h); none below the band.
        assert g["svgs"] == 1 and g["bands"] == 1 and g["band_lower"] == 1, (name, g)
        assert g["points"] >= 2 * 3 and g["low"] == 0, (name, g)
        assert "pinned h2d 4MiB" in g["text"] and "headline" in g["text"]
    assert healthy.overview.count("ok") >= 2

    reload(d, faults=[DEGRADE], **config)
    d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == "degraded", 60, "gpu0 degraded")
    hold_still(d, faults=[DEGRADE], **config)  # the page and the document of one moment
    doc = status(d)
    degraded = look(d, "degraded")
    g0, g1 = degraded.gpus["gpu0"], degraded.gpus["gpu1"]
    assert g0["verdict"] == "degraded" and g1["verdict"] == "ok", (g0, g1)
    # The fault's causes, as the document names them, in the faulted GPU's table of causes;
    # the one that leads in the table of GPUs.
    gpu0 = doc["gpus"][0]
    assert gpu0["causes"], gpu0
    assert g0["causes"] == [c["cause"] for c in gpu0["causes"]], (g0["causes"], gpu0["causes"])
    assert g1["causes"] == []
    leading = next((c["cause"] for c in gpu0["causes"] if c["leads"]),
                   gpu0["headline"]["cause"])
    assert leading in degraded.overview, degraded.overview
    assert "DEGRADED" in g0["text"]
    assert gpu0["code"] and gpu0["code"] in g0["text"], (gpu0["code"], g0["text"][:2000])
    # Its plot shows the fall: the readings since the fault under the band, ringed.
    assert g0["svgs"] >= 1 and g0["low"] >= 1, g0
    assert g1["low"] == 0, g1
    assert "ok" in degraded.incidents and "degraded" in degraded.incidents, degraded.incidents


# -- xferd status ---------------------------------------------------------------------------

def xferd_status(*args):
    r = subprocess.run([BINARY, "status", *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def health_line(*args):
    r = subprocess.run([BINARY, "health", *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout.strip()


def row(table, series):
    """The cells of `series`' row in `xferd status`'s table."""
    for line in table.splitlines():
        if line.startswith("  " + series + " "):
            return line[len(series) + 2:].split()
    raise AssertionError(f"no row for {series} in:\n{table}")


def figure(bytes_per_s, both_ways=False):
    return "-" if bytes_per_s is None else f"{bytes_per_s / (2 if both_ways else 1) / 1e9:.2f}"


def same_moment(url, attempts=50):
    """`xferd status --json`, `xferd status` and `--json` again with no probe in between: the
    document and the table of one moment."""
    for _ in range(attempts):
        rc, before, _ = xferd_status("--url", url, "--socket", "", "--json")
        rc, out, err = xferd_status("--url", url, "--socket", "")
        assert rc == 0, (out, err)
        _, after, _ = xferd_status("--url", url, "--socket", "", "--json")
        if stable_status(json.loads(before)) == stable_status(json.loads(after)):
            return json.loads(before), out
    raise AssertionError("no quiet moment between probes to compare the table with")


def test_the_status_command_shows_the_documents_tables_with_the_exit_status_of_health(daemon):
    config = dict(interval="300ms", devices=2, sizes=BAND)
    d = daemon(sim_config(**config)).start().wait_ready()
    d.wait_for(lambda: status(d)["daemon"]["cycles"] >= 3 and
               all(g["verdict"] == "ok" for g in status(d)["gpus"]), 60, "both ok")
    url = f"http://127.0.0.1:{d.port}"
    doc, out = same_moment(url)
    assert out.splitlines()[0] == health_line("--url", url, "--socket", "")[1]
    assert out.startswith("OK: 2 GPUs within band")
    assert doc["version"] == 1 and len(doc["gpus"]) == 2
    for g in doc["gpus"]:
        block = out.split(f"\ngpu{g['gpu']}  ")[1].split("\ngpu")[0]
        assert block.startswith("OK  "), block
        # Each series' row says what the document says: reading, band, baseline (per
        # direction where it moves both ways at once).
        for s in g["series"]:
            cells = row(block, f"{s['mode']} {s['direction']} {s['size']}")
            both = s["direction"] == "bidir"
            reading = figure(s["bandwidth_bytes_per_second"], both)
            assert reading in cells, (s, cells)
            assert figure(s["band_lower_bytes_per_second"]) in cells, (s, cells)
            if s["baseline_bytes_per_second"] is not None:
                assert figure(s["baseline_bytes_per_second"], both) in cells, (s, cells)
    assert "incidents: none" in out

    # The fault, and no probe after it: the document holds still while both commands read it.
    reload(d, faults=[DEGRADE], **config)
    d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == "degraded", 60, "gpu0 degraded")
    hold_still(d, faults=[DEGRADE], **config)
    rc, out, err = xferd_status("--url", url)
    assert rc == 1, (out, err)
    assert out.splitlines()[0] == health_line("--url", url)[1]
    assert re.match(r"DEGRADED XFERD-3\d\d/diagnose gpu0", out), out.splitlines()[0]
    g0 = status(d)["gpus"][0]
    block = out.split("\ngpu0  ")[1].split("\ngpu1")[0]
    assert block.startswith("DEGRADED  "), block
    leading = next((c["cause"] for c in g0["causes"] if c["leads"]), g0["headline"]["cause"])
    assert f"cause {leading}" in block.splitlines()[1], block
    headline = g0["headline"]
    cells = row(block, f"{headline['mode']} {headline['direction']} {headline['size']}")
    assert cells[0] == "DEGRADED,", cells
    assert "ok -> degraded" in out.split("incidents, newest first:")[1]


def test_the_status_command_asks_like_health_and_says_why_there_is_no_table(daemon):
    d = daemon(sim_config()).start().wait_ready()
    d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == "ok", 30, "ok")
    dead = f"127.0.0.1:{free_port()}"
    # The health socket first, as xferd health asks: the HTTP address given is dead.
    rc, out, err = xferd_status("--socket", str(d.state_dir / "health.sock"),
                                "--web.listen-address", dead)
    assert rc == 0 and out.startswith("OK: 1 GPU within band"), (out, err)
    assert "\ngpu0  OK  " in out
    # Nothing there: unknown, one line; with --json nothing on stdout, the line on stderr.
    rc, out, err = xferd_status("--web.listen-address", dead, "--socket", "")
    assert rc == 2 and out.startswith("UNKNOWN XFERD-911/none: xferd unreachable"), (out, err)
    assert len(out.splitlines()) == 1
    rc, out, err = xferd_status("--web.listen-address", dead, "--socket", "", "--json")
    assert rc == 2 and out == "" and err.startswith("UNKNOWN XFERD-911/none: xferd unreachable"), (out, err)
    # A mistake in the flags is unknown too, naming it.
    rc, out, _ = xferd_status("--timeout", "soon")
    assert rc == 2 and "--timeout" in out
