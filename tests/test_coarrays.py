"""mpilab.coarrays: the Fortran + MPI and Coarray Fortran wave programs of lecture 04.

Every mode of both programs must equal mpilab.halo.serial_wave bit for bit at 1-4
processes on square, non-square and unevenly split grids; bad arguments raise before
anything starts; a hung or crashed run raises and leaves no process behind; the
benchmark writes the agreed JSON. Wall-clock speed is not tested (the benchmark reports it).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import NO_MPI, needs_mpi

from mpilab import coarrays, halo, jobs

OK, WHY = coarrays.available() if NO_MPI is None else (False, NO_MPI)
pytestmark = [needs_mpi, pytest.mark.skipif(not OK, reason=f"no Coarray Fortran: {WHY}")]

GRIDS = [(12, 12), (17, 11), (5, 40)]   # square, non-square, uneven on 2-4 processes


# process ids of the `python -m mpilab.bench coarray` runs of the current test
_BENCHES: set[int] = set()


def _ours():
    """Live processes of this test's wave runs: a wave program (or its launcher) in a job
    this process started, or a benchmark it ran (mpilab.jobs tags a job
    ``<owner pid>-<id>``). Jobs of other test modules running beside this one, the C
    kernels in the same folder (mpilab-pingpong, -halo, -coll) included, are not ours."""
    import psutil

    owners = {str(pid) for pid in (os.getpid(), *_BENCHES)}
    programs = [str(coarrays.BIN / name) for name in ("wave_mpif", "wave_caf")]
    out = []
    for p in jobs.tagged(jobs.TAG, lambda v: v.partition("-")[0] in owners):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:  # ended meanwhile
            continue
        if any(prog in cmd for prog in programs):
            out.append((p.pid, cmd[:120]))
    return out


@pytest.fixture(autouse=True)
def no_process_left():
    _BENCHES.clear()
    yield
    assert _ours() == [], "a Fortran wave process outlived its run"


@pytest.fixture(scope="module")
def built():
    return coarrays.build()


def test_build_makes_both_programs_and_rebuilds_on_change(built):
    assert set(built) == {"wave_mpif", "wave_caf"}
    for exe in built.values():
        assert exe.exists() and os.access(exe, os.X_OK)
    before = {k: v.stat().st_mtime_ns for k, v in built.items()}
    assert {k: v.stat().st_mtime_ns for k, v in coarrays.build().items()} == before
    # a stamp that does not match the sources (as after an edit) rebuilds that program
    (coarrays.BIN / "wave_caf.stamp").write_text("stale\n")
    again = coarrays.build()
    assert again["wave_mpif"].stat().st_mtime_ns == before["wave_mpif"]
    assert again["wave_caf"].stat().st_mtime_ns != before["wave_caf"]
    assert (coarrays.BIN / "wave_caf.stamp").read_text().strip() != "stale"


def test_missing_compiler_is_named(monkeypatch):
    real = coarrays.shutil.which
    monkeypatch.setattr(coarrays.shutil, "which",
                        lambda name: None if name.startswith("caf") else real(name))
    ok, why = coarrays.available()
    assert ok is False and "caf" in why and "OpenCoarrays" in why
    with pytest.raises(coarrays.CoarraysUnavailable, match="OpenCoarrays"):
        coarrays.build()


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_mode_equals_serial_wave_bitwise(built, ranks):
    for nx, ny in GRIDS:
        ref = halo.serial_wave(nx, ny, 60, f0=0.1)
        assert np.count_nonzero(ref) == ref.size       # the wave reached every block
        for mode in coarrays.MODES:
            p = coarrays.run_wave(nx, ny, 60, mode=mode, ranks=ranks, f0=0.1)
            assert p.shape == (ny, nx)
            assert np.array_equal(p, ref), (
                f"{mode} on {ranks} processes, {nx} x {ny}: max |diff| "
                f"{np.abs(p - ref).max():.3g}")


def test_strips_source_courant_and_no_ftz(built):
    nx, ny = 13, 11
    kw = {"f0": 0.08, "courant": 0.7, "source": (1, ny - 2)}
    ref = halo.serial_wave(nx, ny, 45, **kw)
    for dims in ((1, 3), (3, 1)):
        for mode in coarrays.MODES:
            p = coarrays.run_wave(nx, ny, 45, mode=mode, ranks=3, dims=dims, ftz=False, **kw)
            assert np.array_equal(p, ref), f"{mode} {dims}"


def test_zero_steps_is_the_field_at_rest(built):
    for mode in ("blocking", "coarray"):
        assert not coarrays.run_wave(6, 4, 0, mode=mode, ranks=2).any()


def test_bad_arguments_raise_before_anything_runs():
    with pytest.raises(ValueError, match="mode must be one of"):
        coarrays.run_wave(10, 10, 5, mode="telepathy")
    with pytest.raises(ValueError, match="courant"):
        coarrays.run_wave(10, 10, 5, courant=1.0)
    with pytest.raises(ValueError, match="outside"):
        coarrays.run_wave(10, 10, 5, source=(10, 3))
    with pytest.raises(TypeError, match="nx must be an integer"):
        coarrays.run_wave("10", 10, 5)
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        coarrays.run_wave(10, 10, 5, ranks=0)
    with pytest.raises(ValueError, match="do not multiply"):
        coarrays.run_wave(10, 10, 5, ranks=4, dims=(3, 1))
    with pytest.raises(ValueError, match="at least one cell"):
        coarrays.run_wave(1, 10, 5, ranks=2, dims=(1, 2))
    with pytest.raises(TypeError, match="pair"):
        coarrays.run_wave(10, 10, 5, ranks=2, dims=2)
    with pytest.raises(ValueError, match="timeout"):
        coarrays.run_wave(10, 10, 5, timeout=0)
    with pytest.raises(ValueError, match="either sub or nx"):
        coarrays.time_wave("coarray", 8, nx=8, ny=8)
    with pytest.raises(ValueError, match="give sub"):
        coarrays.time_wave("coarray")
    with pytest.raises(ValueError, match="mode must be one of"):
        coarrays.time_wave("blocking,warp", 8)
    with pytest.raises(ValueError, match="reps must be >= 1"):
        coarrays.time_wave("coarray", 8, reps=0)


def test_the_programs_check_their_arguments_too(built):
    # Python checks first; a program started by hand says what is wrong and exits
    for prog, mode in (("wave_mpif", "coarray"), ("wave_caf", "blocking")):
        with pytest.raises(RuntimeError, match=f"{prog}: unknown mode"):
            coarrays._launch(prog, {"nx": 8, "ny": 8, "mode": mode}, 2, 60)
    with pytest.raises(RuntimeError, match="wave_mpif: unknown argument"):
        coarrays._launch("wave_mpif", {"nx": 8, "ny": 8, "mode": "blocking", "zz": 1}, 1, 60)
    with pytest.raises(RuntimeError, match="wave_caf: py \\* px"):
        coarrays._launch("wave_caf", {"nx": 8, "ny": 8, "mode": "coarray", "py": 3, "px": 1},
                         2, 60)


@pytest.mark.parametrize("mode", ["blocking", "nonblocking", "coarray", "coarray-images"])
def test_a_hung_run_is_killed_with_all_its_processes(built, mode):
    with pytest.raises(TimeoutError, match="did not finish"):
        coarrays._run(mode, 20, 12, 5, 0.05, 0.5, 10, 6, 2, 1, 2, True, "shm", 8,
                      debug="hang")
    assert _ours() == []


@pytest.mark.parametrize("mode", ["blocking", "coarray"])
def test_a_crashed_run_raises_with_its_message(built, mode):
    with pytest.raises(RuntimeError, match="crashing on purpose"):
        coarrays._run(mode, 20, 12, 5, 0.05, 0.5, 10, 6, 2, 1, 2, True, "shm", 60,
                      debug="crash")
    assert _ours() == []


def test_reference_window_is_the_serial_wave():
    for source in (None, (2, 3), (59, 49)):
        full = halo.serial_wave(60, 50, 12, source=source)
        win = coarrays.reference(60, 50, 12, source=source, max_points=0)
        assert np.array_equal(win, full)


def test_time_wave_records(built):
    recs = coarrays.time_wave("all", 8, ranks=2, reps=2, rounds=2, min_time=0.001,
                              check_steps=20)
    assert [r["mode"] for r in recs] == list(coarrays.MODES)
    iters = {r["iters"] for r in recs}
    assert len(iters) == 1 and iters.pop() >= 1          # one calibration for all modes
    for r in recs:
        assert (r["sub"], r["nx"], r["ny"], r["dims"], r["ranks"]) == (8, 8, 16, [2, 1], 2)
        assert r["valid"] is True and r["max_abs_err"] == 0.0
        assert 0 < r["t_us_min"] <= r["t_us_median"]
        assert len(r["times_us"]) == 4                   # 2 repetitions x 2 rounds
        assert r["size_bytes"] == halo.halo_bytes("wave", 8, 16, (2, 1))
        assert r["oversubscribed"] is False
        assert r["program"] == coarrays.PROGRAMS[r["mode"]]
        # the barrier each repetition starts from: 2 launches of 31 barriers, one clock
        assert 0 <= r["barrier_exit_skew_us_median"] <= r["barrier_exit_skew_us_max"] < 1e5


def bench(*args, timeout=300):
    with subprocess.Popen([sys.executable, "-m", "mpilab.bench", "coarray", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        _BENCHES.add(proc.pid)  # its jobs are tagged with its pid: ours too
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_bench_writes_valid_json(tmp_path):
    path = tmp_path / "coarray.json"
    res = bench("--sub", "8,24", "--ranks", "3", "--reps", "2", "--rounds", "2",
                "--min-time", "0.001", "--check-max", "300", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "K2" in res.stdout and "INVALID" not in res.stdout
    doc = json.loads(path.read_text())
    for key in ("hostname", "cores", "mpi_library", "ranks", "oversubscribed", "launcher",
                "settings", "command", "dims"):
        assert key in doc["meta"], key
    assert doc["meta"]["ranks"] == 3
    assert doc["meta"]["oversubscribed"] == (3 > doc["meta"]["cores"])
    assert {(r["mode"], r["sub"]) for r in doc["records"]} == {
        (m, s) for m in coarrays.MODES for s in (8, 24)}
    for r in doc["records"]:
        assert r["valid"] is True and r["ranks"] == 3
        assert r["oversubscribed"] == doc["meta"]["oversubscribed"]
        assert 0 < r["t_us_min"] <= r["t_us_median"]
    # sub 24 on 3 processes is past --check-max: checked on the window, still bitwise
    assert any(r["nx"] * r["ny"] > 300 for r in doc["records"])


def test_bench_bad_arguments_are_clear():
    res = bench("--mode", "telepathy", "--sub", "8")
    assert res.returncode == 2 and "mode must be one of" in res.stderr
    res = bench("--sub", "8,x")
    assert res.returncode == 2 and "--sub takes integers" in res.stderr
    res = bench("--sub", "8", "--ranks", "2", "--dims", "2x2")
    assert res.returncode == 2 and "do not multiply" in res.stderr
    res = bench("--sub", "8", "--dims", "two")
    assert res.returncode == 2 and "--dims takes PYxPX" in res.stderr


def test_bench_dims_puts_columns_on_two_processes(tmp_path):
    path = tmp_path / "coarray-1x2.json"
    res = bench("--sub", "8", "--ranks", "2", "--dims", "1x2", "--mode", "blocking,coarray",
                "--reps", "2", "--rounds", "1", "--min-time", "0.001", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(path.read_text())
    assert doc["meta"]["dims"] == [1, 2]
    assert [(r["mode"], r["nx"], r["ny"], r["valid"]) for r in doc["records"]] == [
        ("blocking", 16, 8, True), ("coarray", 16, 8, True)]
