"""mpilab.autograder.quiet: measurements hold the cores, gradings' work shares them.

Real processes, real flock locks; each process writes when it held the lock, and the
tests check the order of those intervals.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from mpilab.autograder import quiet
from mpilab.grading import measured

CTX = mp.get_context("fork")


def _hold(kind: str, where: str, seconds: float, log: str, tag: str, delay: float = 0.0):
    time.sleep(delay)
    lock = quiet.measuring if kind == "measuring" else quiet.working
    asked = time.monotonic()
    with lock(where):
        start = time.monotonic()
        time.sleep(seconds)
        end = time.monotonic()
    with open(log, "a") as f:
        f.write(json.dumps({"tag": tag, "asked": asked, "start": start, "end": end}) + "\n")


def _run(tmp_path: Path, *specs) -> dict[str, dict]:
    """Start one process per (kind, seconds, tag, delay); their lock intervals by tag."""
    log = tmp_path / "log"
    procs = [CTX.Process(target=_hold, args=(kind, str(tmp_path), sec, str(log), tag, delay))
             for kind, sec, tag, delay in specs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0, p.exitcode
    return {r["tag"]: r for r in map(json.loads, log.read_text().splitlines())}


def _overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


@pytest.mark.measures
def test_work_runs_side_by_side(tmp_path):
    got = _run(tmp_path, ("working", 0.8, "a", 0), ("working", 0.8, "b", 0.1))
    assert _overlap(got["a"], got["b"]), got


@pytest.mark.measures
def test_a_measurement_waits_for_running_work_and_holds_off_new_work(tmp_path):
    got = _run(tmp_path, ("working", 1.0, "busy", 0), ("measuring", 0.6, "measure", 0.3),
               ("working", 0.3, "later", 0.6))
    # the measurement waited for the work that was running ...
    assert got["measure"]["start"] >= got["busy"]["end"], got
    # ... and work asked for while it waited came after it (a busy class cannot starve it)
    assert got["later"]["asked"] < got["measure"]["start"], got
    assert got["later"]["start"] >= got["measure"]["end"], got


def test_measurements_go_one_at_a_time(tmp_path):
    got = _run(tmp_path, ("measuring", 0.5, "a", 0), ("measuring", 0.5, "b", 0.1))
    assert not _overlap(got["a"], got["b"]), got


def test_a_measurements_own_ranks_do_not_wait_for_it(tmp_path):
    with quiet.measuring(tmp_path):
        with quiet.working(tmp_path):  # the grader's own pool, inside its measurement
            pass
        with quiet.measuring(tmp_path):  # nested: held already
            pass
    with quiet.working(tmp_path), pytest.raises(RuntimeError, match="inside a grading"):
        with quiet.measuring(tmp_path):
            pass


def _hold_forever(where: str, ready):
    with quiet.measuring(where):
        ready.set()
        time.sleep(60)


@pytest.mark.measures
def test_a_killed_measurement_releases_the_cores(tmp_path):
    ready = CTX.Event()
    p = CTX.Process(target=_hold_forever, args=(str(tmp_path), ready))
    p.start()
    assert ready.wait(10)
    os.kill(p.pid, signal.SIGKILL)
    p.join(5)
    t0 = time.monotonic()
    with quiet.working(tmp_path):
        pass
    assert time.monotonic() - t0 < 5


def _make_once(tmp: str, log: str, measures: bool):
    tempfile.tempdir = tmp  # this process's grading folder: under tmp
    # a sleep stands for the measurement: nothing is timed, whoever runs beside this test
    os.environ.pop("MPILAB_MEASURING", None)
    measured._CACHE.clear()

    def make():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        return {"made": True}

    assert measured.cached("probe", make, measures=measures) == {"made": True}


def _three_gradings(tmp_path: Path, measures: bool) -> int:
    """How many of three gradings started together made the value themselves."""
    log = tmp_path / "made"
    procs = [CTX.Process(target=_make_once, args=(str(tmp_path), str(log), measures))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return len(log.read_text().split())


def test_gradings_side_by_side_share_one_measurement(tmp_path):
    assert _three_gradings(tmp_path, measures=True) == 1, "each grading measured for itself"


def test_gradings_side_by_side_share_one_simulation(tmp_path):
    """Not a measurement (a simulation, a trace): still made once for the gradings that
    start together, not once each."""
    assert _three_gradings(tmp_path, measures=False) == 1, "each grading made its own"


def test_no_measurement_where_work_runs_beside_unseen(tmp_path, monkeypatch):
    """MPILAB_MEASURING=forbidden (make test's side-by-side phase): the user's grading
    folder refuses a measurement, in this process and in those it starts; a lock in a
    folder of its own (these tests) is not a measurement of the cores."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("MPILAB_MEASURING", "forbidden")
    with pytest.raises(RuntimeError, match="mark it"), quiet.measuring():
        pass
    with pytest.raises(RuntimeError, match="mark it"):
        measured._CACHE.clear()
        measured.cached("probe-forbidden", lambda: 1, measures=True)
    (tmp_path / "own").mkdir()
    with quiet.measuring(tmp_path / "own"):
        pass
    monkeypatch.delenv("MPILAB_MEASURING")
    with quiet.measuring():
        pass
