"""Evidence kept with an incident, end to end on the real binary: a simulated fault turns a
GPU DEGRADED, a record appears in the state directory's evidence/, the incident log and the
status API link it, `xferd evidence` prints it, within its bounds; a full disk drops the
record with a log line and a count while the daemon goes on; what a crash left is removed
at start; links, FIFOs and huge files in the directory are never followed nor read
unbounded (docs/health.md, "Evidence records"; docs/reliability.md)."""
import json
import os
import re
import signal
import subprocess

import pytest

from xferd_harness import BINARY, fill_disk, sim_config, small_tmpfs

# 4 MiB: held to the band from the first reading. A link trained down from the start.
DOWNTRAIN = [{"kind": "downtrain", "gen": 4, "width": 4}]
RECORD = re.compile(r"^\d{8}T\d{9}Z-gpu\d+\.json$")
MAX_RECORD_BYTES = 256 * 1024


def status(d):
    code, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def evidence(*args, timeout=30):
    r = subprocess.run([BINARY, "evidence", *args], capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def records(d):
    folder = d.state_dir / "evidence"
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if RECORD.match(p.name))


def reload(d, faults=()):
    mark = len(d.log())
    d.write_config(sim_config(faults=faults, sizes=('"4MiB"',)))
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied", start=mark)


def test_a_degraded_gpu_keeps_its_evidence_linked_and_printed(daemon):
    d = daemon(sim_config(faults=DOWNTRAIN, sizes=('"4MiB"',))).start().wait_ready()
    d.wait_for(lambda: status(d)["gpus"][0]["evidence"] is not None, 60, "an evidence record")
    doc = status(d)
    g = doc["gpus"][0]
    assert (g["verdict"], g["code"], g["action"]) == ("degraded", "XFERD-101", "reboot"), g
    name = g["evidence"]["record"]
    assert RECORD.match(name), name
    assert records(d) == [name]
    path = d.state_dir / "evidence" / name
    assert g["evidence"]["path"] == str(path)
    assert 0 < path.stat().st_size <= MAX_RECORD_BYTES
    assert g["evidence"]["bytes"] == path.stat().st_size
    # The incident that turned it DEGRADED links it, in the status API and in the state file.
    incident = doc["incidents"][0]
    assert incident["to"] == "degraded" and incident["evidence"] == name, incident
    assert incident["causes"][0]["code"] == "XFERD-101", incident
    assert (doc["evidence"]["written"], doc["evidence"]["dropped"]) == (1, 0), doc["evidence"]
    d.wait_for(lambda: any(i.get("evidence") == name for i in
                           json.loads((d.state_dir / "state.json").read_text())["incidents"]),
               30, "the state file's incident to link the record")
    assert d.value("xferd_evidence_records_total", result="written") == 1
    assert d.value("xferd_evidence_records_total", result="dropped") == 0
    d.wait_log(r"evidence: gpu 0: kept \S+" + re.escape(name) +
               r" \(\d+ bytes\) for its DEGRADED verdict \(XFERD-101 link_downtrained\)")

    # What it holds: the streak that flipped it, each hop's state and capability, the
    # counters, NUMA and IOMMU, the driver.
    record = json.loads(path.read_text())
    assert record["verdict"]["code"] == "XFERD-101"
    assert record["incident"]["time"] == incident["time"]
    assert any(r["in_streak"] for s in record["streak"] for r in s["readings"]), record["streak"]
    hops = record["link"]["hops"]
    assert hops[0]["downtrained"] and hops[0]["current"]["width"] == 4, hops
    assert hops[0]["link_max"]["width"] == 16, hops
    assert record["link_errors"]["during"]["reading"]["devices"], record["link_errors"]
    assert record["gpu"]["driver_version"] == "sim"
    assert record["lspci"]["run"] is False and "simulated" in record["lspci"]["reason"]

    # `xferd evidence`, from the daemon's own config (its state_dir) or --state-dir.
    rc, out, err = evidence("--state-dir", str(d.state_dir))
    assert rc == 0, err
    assert name in out and "XFERD-101/reboot" in out and "link_downtrained" in out, out
    rc, out, err = evidence("0", "--state-dir", str(d.state_dir))
    assert rc == 0, err
    for words in ("verdict: XFERD-101/reboot link_downtrained", "the readings that flipped it",
                  "path (GPU first)", "DOWNTRAINED", "link error counters", "lspci: not run"):
        assert words in out, (words, out)
    rc, out, _ = evidence("0", "--json", "--state-dir", str(d.state_dir))
    assert rc == 0 and json.loads(out)["name"] == name
    rc, out, _ = evidence("--json", "--state-dir", str(d.state_dir))
    assert [r["record"] for r in json.loads(out)] == [name]
    assert evidence(g["uuid"], "--state-dir", str(d.state_dir))[0] == 0
    rc, out, _ = evidence("3", "--state-dir", str(d.state_dir))
    assert rc == 1 and "no evidence record of GPU 3" in out, out
    d.stop()
    # The daemon stopped: the technician still reads it.
    assert evidence("0", "--state-dir", str(d.state_dir))[0] == 0


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs (see small_tmpfs)."""
    yield from small_tmpfs(tmp_path / "tiny", "64k")


def test_a_full_disk_drops_the_record_and_the_daemon_goes_on(daemon, tmp_path, tiny_fs):
    # The evidence directory on a disk of its own, full; the state file beside it works.
    state = tmp_path / "state"
    state.mkdir()
    d = daemon(sim_config(sizes=('"4MiB"',)), state_dir=state)
    evidence_dir = state / "evidence"
    evidence_dir.mkdir()
    assert subprocess.run(["mount", "--bind", str(tiny_fs), str(evidence_dir)]).returncode == 0
    try:
        filler = evidence_dir / "filler"
        fill_disk(filler)
        d.start().wait_ready()
        mark = len(d.log())
        reload(d, DOWNTRAIN)
        d.wait_log(r"evidence: gpu 0: the record of its DEGRADED verdict \(XFERD-101 "
                   r"link_downtrained\) is dropped: .*No space left on device.*the daemon goes on",
                   timeout=60, start=mark)
        assert d.value("xferd_evidence_records_total", result="dropped") == 1
        doc = status(d)
        assert doc["evidence"]["dropped"] == 1, doc["evidence"]
        assert "No space left on device" in doc["evidence"]["last_problem"]
        assert doc["gpus"][0]["evidence"] is None and doc["incidents"][0]["evidence"] is None
        # Nothing half written stays; the daemon goes on judging and serving.
        assert sorted(p.name for p in evidence_dir.iterdir()) == ["filler"]
        assert d.alive() and status(d)["gpus"][0]["verdict"] == "degraded"
        # Space again: the next DEGRADED keeps its record.
        filler.unlink()
        reload(d)
        d.wait_for(lambda: status(d)["gpus"][0]["verdict"] == "ok", 60, "ok again")
        reload(d, DOWNTRAIN)
        d.wait_for(lambda: records(d), 60, "a record once there is space")
        assert d.value("xferd_evidence_records_total", result="written") == 1
    finally:
        d.stop()
        subprocess.run(["umount", "-l", str(evidence_dir)])


def test_leftovers_are_removed_and_hostile_files_never_followed(daemon, tmp_path):
    state = tmp_path / "state"
    folder = state / "evidence"
    folder.mkdir(parents=True)
    # What a crash while writing leaves: the write's temporary file (never a half record).
    abandoned = folder / ".20261201T100000000Z-gpu0.json.tmp.Ab12Cd"
    abandoned.write_text('{"half')
    # Named as records: a link to a file elsewhere, a FIFO, a huge (sparse) file.
    secret = tmp_path / "secret.json"
    secret.write_text('{"gpu": {"uuid": "not yours"}}')
    (folder / "20261201T100001000Z-gpu0.json").symlink_to(secret)
    os.mkfifo(folder / "20261201T100002000Z-gpu0.json")
    with open(folder / "20261201T100003000Z-gpu0.json", "wb") as f:
        f.truncate(1 << 30)
    (folder / "notes.txt").write_text("the operator's")
    # And one nested far deeper than a record (within the size bound): refused, never built.
    deep = '{"a": ' + "[" * 100000 + "]" * 100000 + "}"
    (folder / "20261201T100004000Z-gpu0.json").write_text(deep)
    d = daemon(sim_config(faults=DOWNTRAIN, sizes=('"4MiB"',)), state_dir=state).start()
    d.wait_log(r"evidence: removed 1 temporary file\(s\) in \S+evidence that writes "
               r"interrupted by a crash left")
    assert not abandoned.exists()
    d.wait_for(lambda: status(d)["gpus"][0]["evidence"] is not None, 60, "an evidence record")
    name = status(d)["gpus"][0]["evidence"]["record"]
    # The list: the record and the huge file (unreadable, said so); never the link or FIFO;
    # nothing hangs, nothing reads a gigabyte.
    rc, out, err = evidence("--state-dir", str(state), timeout=20)
    assert rc == 0, err
    assert name in out
    assert re.search(r"20261201T100003000Z-gpu0.json +0  unreadable: .*larger than", out), out
    assert "20261201T100001000Z" not in out and "20261201T100002000Z" not in out, out
    assert re.search(r"20261201T100004000Z-gpu0.json +0  unreadable: .*nests deeper", out), out
    rc, out, err = evidence("--record", "20261201T100004000Z-gpu0.json", "--json",
                            "--state-dir", str(state))
    assert rc == 1 and "nests deeper" in err, (out, err)
    rc, out, err = evidence("--record", "20261201T100001000Z-gpu0.json", "--state-dir", str(state))
    assert rc == 1 and "not yours" not in out + err, (out, err)
    # Left as they were: the link, its target, the FIFO, the notes.
    assert (folder / "20261201T100001000Z-gpu0.json").is_symlink()
    assert secret.read_text() == '{"gpu": {"uuid": "not yours"}}'
    assert (folder / "20261201T100002000Z-gpu0.json").is_fifo()
    assert (folder / "notes.txt").read_text() == "the operator's"
    assert d.alive()
