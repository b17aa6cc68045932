"""Issue 6's fault matrix on the simulated device. For each fault: the daemon stays up,
/metrics answers, the right counter moves, the log says what happened, and what was learned
is kept."""
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from xferd_harness import Daemon, fill_disk, sim_config, small_tmpfs

BASELINE_KEY = dict(gpu="0", mode="pinned", direction="h2d", size="1MiB")


def learned(d):
    """Run until a baseline is learned and written; return its value."""
    d.wait_for(lambda: d.value("xferd_bandwidth_baseline_bytes_per_second", default=0,
                               **BASELINE_KEY) > 0, 60, "a baseline to be learned")
    d.wait_for(lambda: saved_baselines(d), 10, "the baseline in the state file")
    return d.value("xferd_bandwidth_baseline_bytes_per_second", **BASELINE_KEY)


def saved_baselines(d):
    path = d.state_dir / "state.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("baselines", {})


def inject(d, **config):
    t = len(d.log())
    d.write_config(sim_config(**config))
    d.signal(signal.SIGHUP)
    d.wait_log(r"reload: configuration .* applied", start=t)


def assert_kept(d, baseline):
    assert d.alive()
    assert d.value("xferd_bandwidth_baseline_bytes_per_second", **BASELINE_KEY) == \
        pytest.approx(baseline, rel=0.05)
    assert saved_baselines(d), "the state file lost its baselines"


def counted_after_learning(daemon, fault, result, at_least, what):
    """A daemon that learned a baseline, then got `fault` and counted at least `at_least`
    probe runs ending in `result` (waiting for `what`); returns it and the baseline."""
    d = daemon(sim_config()).start().wait_ready()
    baseline = learned(d)
    inject(d, faults=[fault])
    d.wait_for(lambda: d.value("xferd_probe_runs_total", sum_all=True, gpu="0",
                               result=result) >= at_least, 20, what)
    return d, baseline


def test_probe_error(daemon):
    d, baseline = counted_after_learning(daemon, {"kind": "error_every", "every": 3}, "error", 3,
                                         "the error counter to move")
    assert "probe error" in d.log()
    assert d.value("xferd_cycles_total", result="partial") >= 1
    assert_kept(d, baseline)


def test_hang_past_deadline(daemon):
    d = daemon(sim_config(interval="2s")).start().wait_ready()
    baseline = learned(d)
    inject(d, interval="2s", faults=[{"kind": "hang"}])
    d.wait_log(r"probe hung: no answer after [0-9.]+ s \(deadline 1.0 s\)", timeout=15)
    assert d.value("xferd_probe_runs_total", sum_all=True, gpu="0", result="timeout") >= 1
    assert d.get("/healthz")[0] == 503
    assert_kept(d, baseline)


def test_hang_with_a_deadline_under_a_second(daemon):
    # The log says the deadline in milliseconds below a second: 40 ms, not "0.0 s".
    d = daemon(sim_config(interval="2s", deadline="40ms", faults=[{"kind": "hang"}])).start()
    m = d.wait_log(r"probe hung: no answer after [0-9.]+ s \(deadline [^)]*\)", timeout=15)
    assert m.group(0).endswith("(deadline 40 ms)"), m.group(0)


def test_device_lost_mid_cycle(daemon):
    d, baseline = counted_after_learning(daemon, {"kind": "lost"}, "error", 13,
                                         "every probe to fail")
    assert "device lost" in d.log()
    assert_kept(d, baseline)


def test_slow_device_times_out(daemon):
    d, baseline = counted_after_learning(daemon, {"kind": "slow", "factor": 1000.0}, "timeout", 3,
                                         "the timeout counter to move")
    assert "probe timed out" in d.log()
    assert_kept(d, baseline)


def test_state_dir_unwritable(daemon, tmp_path):
    # A regular file where a directory should be: unwritable even for root.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    d = daemon(sim_config(), state_dir=blocker / "state").start().wait_ready()
    d.wait_for(lambda: d.value("xferd_state_write_errors_total") >= 2, 20,
               "state write errors to be counted")
    d.wait_log(r"state: .*baselines are kept in memory")
    # Learning goes on in memory.
    d.wait_for(lambda: d.value("xferd_bandwidth_baseline_bytes_per_second", default=0,
                               **BASELINE_KEY) > 0, 60, "a baseline learned in memory")
    said = [l for l in d.log().splitlines() if "error state:" in l]
    assert len(said) == 1, f"said once, not every cycle: {said}"


def test_state_file_corrupt(daemon, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text('{"version": 1, "baselines": {"SIM-')
    d = daemon(sim_config(), state_dir=state).start().wait_ready()
    d.wait_log(r"state: .*corrupt")
    assert list(state.glob("state.json.corrupt-*")), os.listdir(state)
    d.wait_for(lambda: saved_baselines(d) or
               json.loads((state / "state.json").read_text())["version"] == 1, 20,
               "a fresh state file")


def test_state_file_over_the_window_is_kept_beside_it(daemon, tmp_path):
    """The review: a state file whose shape is valid but holds more than xferd keeps (63 MB,
    one series of ~3.5 M values) became 2.3 KB at the next write, and the log said only
    "1 learned series". Now the file as it was is kept under a name of its own, and the log
    says what goes and where the copy is. Two corrupt files, each moved aside in turn, keep
    a name of their own (two in one second shared one)."""
    state = tmp_path / "state"
    state.mkdir()
    values = 3_500_000
    with open(state / "state.json", "w") as f:
        f.write('{"version": 1, "baselines": {"SIM-0": {"pinned/h2d/1MiB": [')
        f.write(",".join(["25219372953.438171"] * values))
        f.write("]}}}\n")
    size = (state / "state.json").stat().st_size
    d = daemon(sim_config(), state_dir=state).start().wait_ready()
    line = d.wait_log(r"state: .* holds more than xferd keeps: (\d+) older values of 1 series "
                      r"longer than the (\d+) kept .*kept as (\S+state\.json\.trimmed-\S+),")
    assert int(line.group(1)) + int(line.group(2)) == values, line.group(0)
    copy = Path(line.group(3))
    assert copy.stat().st_size == size
    d.wait_for(lambda: (state / "state.json").stat().st_size < 100_000, 20,
               "the next write to keep the window only")
    assert copy.stat().st_size == size, "the copy must stay whole"
    print(f"\n{size / 1e6:.1f} MB state file of one {values}-value series: "
          f"{line.group(1)} values dropped, the whole file kept as {copy.name}")
    d.stop()

    names = set()
    for i in range(2):
        (state / "state.json").write_text('{"version": 1, "baselines": {"SIM-')
        d = daemon(sim_config(), state_dir=state).start().wait_ready()
        names.add(d.wait_log(r"state: .*corrupt .*moved it to (\S+) ").group(1))
        d.stop()
    assert len(names) == 2 and all(Path(n).exists() for n in names), names


def test_state_file_from_a_future_version(daemon, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    future = json.dumps({"version": 99, "baselines": {}, "from": "a newer xferd"})
    (state / "state.json").write_text(future)
    d = daemon(sim_config(), state_dir=state).start().wait_ready()
    d.wait_log(r"state: .*(version|newer)")
    n = d.value("xferd_cycles_total", sum_all=True)
    d.wait_for(lambda: d.value("xferd_cycles_total", sum_all=True) >= n + 3, 20, "more cycles")
    assert (state / "state.json").read_text() == future, "a newer file must not be overwritten"
    assert d.alive()


@pytest.fixture
def tiny_fs(tmp_path):
    """A 256 KiB tmpfs (see small_tmpfs)."""
    yield from small_tmpfs(tmp_path / "tiny", "256k")


def test_textfile_on_a_full_disk(daemon, tiny_fs):
    textfile = tiny_fs / "xferd.prom"
    d = daemon(sim_config(extra=f'[daemon]\ntextfile_path = "{textfile}"\n')).start().wait_ready()
    d.wait_for(textfile.exists, 10, "the textfile")
    assert "xferd_bandwidth_bytes_per_second" in textfile.read_text()
    # Fill the disk.
    filler = tiny_fs / "filler"
    fill_disk(filler)
    d.wait_for(lambda: d.value("xferd_textfile_write_errors_total") >= 2, 20,
               "textfile write errors to be counted")
    assert "No space left on device" in d.log() or "disk" in d.log().lower()
    # The last good file stays whole and readable by node_exporter; no temp files linger.
    text = textfile.read_text()
    assert text.rstrip().endswith(("}", "0", "1")) or text.endswith("\n")
    assert "xferd_bandwidth_bytes_per_second" in text
    assert sorted(p.name for p in tiny_fs.iterdir()) == ["filler", "xferd.prom"]
    filler.unlink()
    d.wait_log(r"textfile: writing .* works again")
    assert d.alive()


def test_a_textfile_no_longer_written_is_named(daemon, tmp_path):
    """A reload that moves or turns off the textfile leaves the old file with the last
    cycle's values, which node_exporter goes on exporting as if current: the log says so."""
    old, new = tmp_path / "old.prom", tmp_path / "new.prom"
    d = daemon(sim_config(extra=f'[daemon]\ntextfile_path = "{old}"\n')).start().wait_ready()
    d.wait_for(old.exists, 10, "the textfile")
    mark = len(d.log())
    d.write_config(sim_config(extra=f'[daemon]\ntextfile_path = "{new}"\n'))
    d.signal(signal.SIGHUP)
    d.wait_log(r"the textfile \S*old.prom is no longer written \(now \S*new.prom\); "
               r"node_exporter exports its last values until it is removed", start=mark)
    d.wait_for(new.exists, 10, "the new textfile")
    assert d.alive()


def test_a_symlinked_textfile_lends_its_target_nothing(daemon, tmp_path):
    """The review: a textfile that was a symbolic link made the new .prom take the link's
    target's mode and group. A link lends nothing (docs/http.md, "Textfile output"): it is
    replaced by the file itself, 0644 and xferd's group, its target left as it was, and the
    log says so."""
    target = tmp_path / "elsewhere.prom"
    target.write_text("theirs\n")
    target.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(target, -1, 65534)
    link = tmp_path / "xferd.prom"
    link.symlink_to(target)
    d = daemon(sim_config(extra=f'[daemon]\ntextfile_path = "{link}"\n')).start().wait_ready()
    d.wait_for(lambda: not link.is_symlink() and link.exists(), 10, "the textfile written")
    st = os.lstat(link)
    assert (st.st_mode & 0o7777) == 0o644, oct(st.st_mode)
    assert st.st_gid == os.getegid()
    assert "xferd_cycles_total" in link.read_text()
    assert target.read_text() == "theirs\n" and (target.stat().st_mode & 0o7777) == 0o600
    d.wait_log(r"textfile: \S*xferd.prom is a symbolic link \(to \S*elsewhere.prom\); it is "
               r"replaced by a regular file")


def test_kill9_during_state_writes_never_tears_the_state_file(tmp_path):
    """30 kill -9 at random moments while the daemon writes its state and its textfile every
    ~20 ms: every restart finds a whole state file (old or new) and says nothing is corrupt,
    and the temporary files of interrupted writes are gone once it has started (the
    textfile's used to stay for good: 8 after 40 kills)."""
    state = tmp_path / "state"
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    rng = random.Random(4)
    extra = f'[daemon]\ntextfile_path = "{textdir / "xferd.prom"}"\n'
    d = Daemon(tmp_path / "d", sim_config(interval="20ms", extra=extra), state_dir=state)
    kills = 0
    for i in range(30):
        d.start()
        d.wait_for(lambda: (state / "state.json").exists(), 20, "a state file")
        # Past the first few writes, then at a random point in a write cycle.
        time.sleep(0.05 + rng.random() * 0.3)
        d.kill9()
        kills += 1
        text = (state / "state.json").read_text()
        doc = json.loads(text)  # raises on a torn file
        assert doc["version"] == 1
        log = d.log()
        assert "corrupt" not in log, log[-2000:]
    assert kills == 30
    # Temp files of interrupted writes do not pile up.
    assert len(list(state.iterdir())) <= 3, os.listdir(state)
    # Where no kill landed inside a textfile write, one that did (a partial file under the
    # temporary name the write gives it) stands in for it.
    (textdir / ".xferd.prom.tmp.KiLLed").write_text("# HELP xferd_build_info A metric with a ")
    left = sorted(p.name for p in textdir.glob(".xferd.prom.tmp.*"))
    # And a last normal run loads it, and removes what the killed writes left.
    d.start()
    d.wait_ready()
    d.wait_log(r"state: .*state.json \(\d+ learned series\)")
    d.wait_for(lambda: not list(textdir.glob(".xferd.prom.tmp.*")), 10,
               f"the textfile's leftovers ({left}) to be removed")
    assert d.stop() == 0
    assert not list(state.glob(".state.json.tmp.*")), os.listdir(state)
    assert sorted(p.name for p in textdir.iterdir()) == ["xferd.prom"], os.listdir(textdir)
    print(f"\n{len(left) - 1} textfile temporary files left by 30 kills (and 1 planted); "
          "none after a start")
