"""mpilab.grading and mpilab.build on real MPI engines: results, failures, messages, memory.

One cluster of 4 engines serves every test (checks run on sub-communicators of 2-4
ranks). Tests that make a check time out or kill an engine cost a restart of the engines
(about 5 s each); they also show the cluster is usable again afterwards.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from mpilab import build, cluster, grading, runtime
from mpilab.grading import (
    BadResult,
    CheckFailed,
    EngineDied,
    RaisedError,
    Skipped,
    TimedOut,
    call_local,
    expect,
    expect_close,
    expect_equal,
    expect_per_rank,
    expect_timing,
    run_on_ranks,
)

try:
    runtime.mpiexec()
    HAVE_MPI = True
except runtime.MPINotFound:
    HAVE_MPI = False

mpi = pytest.mark.skipif(not HAVE_MPI, reason="no MPI launcher on this machine")
# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def lab():
    c = cluster.start(4, cluster_id=f"mpilab-test-grading-{os.getpid()}")
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def fresh_memory():
    grading.forget_timeouts()
    yield
    grading.forget_timeouts()


# --------------------------------------------------------------------------------------
# functions the engines run


def ring_pass(comm, token):
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        comm.send(token, dest=1 % size)
        return comm.recv(source=size - 1)
    seen = comm.recv(source=rank - 1)
    comm.send(seen + rank, dest=(rank + 1) % size)
    return seen


def exchange_naive(comm, data):
    rank, size = comm.Get_rank(), comm.Get_size()
    received = np.empty_like(data)
    comm.Send(data, dest=(rank + 1) % size)
    comm.Recv(received, source=(rank - 1) % size)
    return received


def exchange_fixed(comm, data):
    rank, size = comm.Get_rank(), comm.Get_size()
    received = np.empty_like(data)
    comm.Sendrecv(data, dest=(rank + 1) % size, recvbuf=received, source=(rank - 1) % size)
    return received


def on_own_data(comm, exchange, n):
    return exchange(comm, np.arange(n, dtype=float) + 1000 * comm.Get_rank())


# --------------------------------------------------------------------------------------
# run_on_ranks


@mpi
@pytest.mark.parametrize("size", [2, 3, 4])
def test_results_by_rank_on_a_sub_communicator(lab, size):
    got = run_on_ranks(ring_pass, 10, ranks=size)
    assert got == [10 + size * (size - 1) // 2] + [10 + k * (k - 1) // 2 for k in range(1, size)]


@mpi
def test_default_is_every_engine_and_only_the_sub_communicator_runs(lab):
    assert run_on_ranks(lambda comm: comm.Get_size()) == [4, 4, 4, 4]
    assert run_on_ranks(lambda comm: comm.Get_size(), ranks=3) == [3, 3, 3]


@mpi
def test_numpy_comes_back_as_plain_data(lab):
    a, b = run_on_ranks(lambda comm: (np.float64(comm.rank + 0.5), np.arange(3) * comm.rank,
                                      np.int32(7)), ranks=2)
    assert type(a[0]) is float and type(a[2]) is int
    assert type(b[1]) is np.ndarray and b[1].tolist() == [0, 1, 2]


@mpi
def test_objects_that_are_not_plain_data_are_refused(lab):
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    with pytest.raises(BadResult, match="object of type .*AlwaysEqual"):
        run_on_ranks(lambda comm: AlwaysEqual(), ranks=2)
    with pytest.raises(BadResult, match="generator"):
        run_on_ranks(lambda comm: (i for i in range(3)), ranks=2)


@pytest.mark.measures
@mpi
@pytest.mark.parametrize("size", [2, 3])
def test_a_deadlock_times_out_with_the_stuck_lines_and_the_cluster_recovers(lab, size):
    t0 = time.perf_counter()
    with pytest.raises(TimedOut) as info:
        run_on_ranks(on_own_data, exchange_naive, 1 << 18, ranks=size, timeout=3)
    msg = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert f"did not finish within 3 s on {size} ranks" in msg
    assert "comm.Send(data" in msg and "deadlock" in msg
    assert "restarted" in msg
    assert time.perf_counter() - t0 < 40
    # the same exchange, fixed, runs at once on the restarted engines
    got = run_on_ranks(on_own_data, exchange_fixed, 1 << 18, ranks=size, timeout=10)
    assert [g[0] for g in got] == [1000.0 * ((r - 1) % size) for r in range(size)]


@mpi
def test_an_endless_loop_is_named_as_such(lab):
    def spin(comm):
        if comm.Get_rank() == 1:
            while True:
                pass
        return 0

    with pytest.raises(TimedOut, match="(?s)rank 1 was at line .*endless loop"):
        run_on_ranks(spin, ranks=2, timeout=2)


@mpi
def test_an_exception_names_the_rank_and_the_line(lab):
    def picky(comm):
        if comm.Get_rank() == 2:
            raise ValueError("rank two objects")
        return comm.Get_rank()

    with pytest.raises(RaisedError) as info:
        run_on_ranks(picky, ranks=3)
    msg = str(info.value)
    assert "rank 2: ValueError: rank two objects" in msg
    assert 'raise ValueError("rank two objects")' in msg


@mpi
def test_an_exception_that_leaves_partners_waiting_is_reported(lab):
    def half(comm):
        if comm.Get_rank() == 1:
            raise KeyError("lost")
        return comm.recv(source=1)

    with pytest.raises(TimedOut, match="(?s)it had raised on rank 1: KeyError"):
        run_on_ranks(half, ranks=2, timeout=2)


@pytest.mark.measures
@mpi
def test_a_timed_out_function_fails_fast_later_even_renamed(lab):
    def stuck(comm):
        return comm.recv(source=comm.Get_rank())  # waits for itself

    with pytest.raises(TimedOut):
        run_on_ranks(stuck, ranks=2, timeout=2)
    t0 = time.perf_counter()
    with pytest.raises(Skipped, match="timed out in an earlier check"):
        run_on_ranks(stuck, ranks=3, timeout=2)

    def stuck_again(comm):  # same body, other name: the same function for the memory
        return comm.recv(source=comm.Get_rank())

    with pytest.raises(Skipped):
        run_on_ranks(stuck_again, ranks=2)
    assert time.perf_counter() - t0 < 0.5
    # reloading the module (as hidden tests do) keeps the memory
    g = importlib.reload(grading)
    with pytest.raises(g.Skipped):
        g.run_on_ranks(stuck, ranks=2)
    # a changed function is new
    assert run_on_ranks(lambda comm: comm.Get_rank(), ranks=2) == [0, 1]


@mpi
def test_a_dead_engine_is_reported_and_the_cluster_restarted(lab):
    def die(comm):
        if comm.Get_rank() == 1:
            os._exit(3)
        return 0

    with pytest.raises(EngineDied, match="rank 1 died"):
        run_on_ranks(die, ranks=2, timeout=10)
    assert run_on_ranks(lambda comm: comm.Get_rank(), ranks=4) == [0, 1, 2, 3]


@mpi
def test_a_cluster_left_busy_is_restarted_before_the_check(lab):
    def forever():
        import time

        time.sleep(3600)

    lab.view.apply_async(forever)  # as if a student's own run had been interrupted
    assert run_on_ranks(lambda comm: comm.Get_rank(), ranks=2) == [0, 1]


@mpi
def test_more_ranks_than_engines_is_a_clear_failure(lab):
    with pytest.raises(CheckFailed, match="needs 5 ranks but the notebook's cluster has 4"):
        run_on_ranks(ring_pass, 1, ranks=5)


@mpi
def test_something_that_cannot_travel_is_explained(lab):
    import threading

    lock = threading.Lock()
    with pytest.raises(RaisedError, match="could not be sent to the engines"):
        run_on_ranks(lambda comm: lock.locked(), ranks=2)


# --------------------------------------------------------------------------------------
# call_local


def test_call_local_times_out_with_the_line():
    def spin():
        while True:
            pass

    with pytest.raises(TimedOut, match="(?s)within 0.5 s; it was at line .*while True"):
        call_local(spin, timeout=0.5)
    with pytest.raises(Skipped):
        call_local(spin, timeout=0.5)


def test_call_local_reports_an_exception_and_returns_plain_data():
    with pytest.raises(RaisedError, match="ZeroDivisionError"):
        call_local(lambda: 1 / 0)
    assert call_local(lambda x: (np.float64(x), np.arange(2)), 1.5)[0] == 1.5
    with pytest.raises(BadResult):
        call_local(lambda: object())


# --------------------------------------------------------------------------------------
# comparisons


def message(fn, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_expect_equal_says_where():
    assert message(expect_equal, [1, 2, 5], [1, 2, 3], what="the list") == \
        "the list[2] is 5, expected 3"
    m = message(expect_equal, np.arange(100), np.where(np.arange(100) == 57, 0, np.arange(100)))
    assert "differs at 1 of 100 elements; the first at index 57: 57, expected 0" in m
    assert "has 3 elements, expected 4" in message(expect_equal, [1, 2, 3], [1, 2, 3, 4])
    expect_equal((1.5, np.arange(3)), [1.5, [0, 1, 2]])


def test_expect_close_states_the_tolerance():
    m = message(expect_close, 0.91, 0.45, what="α", rtol=1e-3)
    assert m == "α is 0.91, expected 0.45 (within 0.001 relative)"
    expect_close(0.4500001, 0.45, rtol=1e-6)
    assert "nan" in message(expect_close, float("nan"), 1.0)


def test_expect_per_rank_names_each_wrong_rank():
    m = message(expect_per_rank, [13, 10, 12], [13, 10, 11], what="received")
    assert m == "rank 2 received 12, expected 11"
    m = message(expect_per_rank, [None, 5, 6], [1, 5, 7], what="saw", label="ring on 3 ranks")
    assert m.startswith("ring on 3 ranks: 2 of 3 ranks are wrong:")
    assert "rank 0 returned None, expected 1 (a missing return?)" in m
    arrays = {f"rank {r}'s array": np.arange(10) + 1000 * r for r in range(2)}
    m = message(expect_per_rank, [arrays["rank 0's array"], arrays["rank 0's array"]],
                [arrays["rank 1's array"], arrays["rank 0's array"]], what="received",
                known=arrays)
    assert m == "rank 0 received rank 0's array, expected rank 1's array"


def test_values_cannot_bring_their_own_equality():
    class Liar(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    assert "subclass of int" in message(expect_equal, Liar(3), 4)
    assert "subclass of int" in message(expect_per_rank, [Liar(3)], [4])
    assert message(expect, np.array([True, True]), "an array is no verdict") == \
        "an array is no verdict"


def test_expect_timing_explains_units_and_loop_totals():
    assert "seconds" in message(expect_timing, 3e-6, 3.0)
    assert "time of the whole loop" in message(expect_timing, 600 * 3.0, 3.0, iters=300)
    assert "loop's time in seconds" in message(expect_timing, 600 * 3.0 * 1e-6, 3.0, iters=300)
    # the student's loop ran 4x slower than the best reference (a busy machine): still named
    assert "loop's time in seconds" in message(expect_timing, 4 * 400 * 8.22e-6, 8.22,
                                                iters=200)
    assert "positive" in message(expect_timing, -1.0, 3.0)
    assert 0.5 < expect_timing(5.0, 3.0) < 2


def test_expect_timing_refuses_a_loop_longer_than_the_call_that_ran_it():
    """Lab 01: 200 round trips of 10 µs one way make a loop of 4,000 µs, which fits a call
    of 4,100 µs (or of 4,000, the clock's granularity allowed); the round trip reported as
    one way (20 µs: 8,000) does not, though it is within the band of the course's time;
    a made-up 100 µs does not either."""
    assert expect_timing(10.0, 5.0, iters=200, elapsed_us=4100.0) == 2.0
    assert expect_timing(10.0, 5.0, iters=200, elapsed_us=4000.0 / 1.005) == 2.0
    assert expect_timing(20.0, 5.0, iters=200) == 4.0  # the band alone lets it through
    said = message(expect_timing, 20.0, 5.0, iters=200, elapsed_us=4100.0)
    assert "did you time the round trip?" in said and "ran for 4100 µs" in said, said
    assert "would be 1.95 times as long as the whole call" in said, said
    said = message(expect_timing, 100.0, 5.0, iters=200, elapsed_us=4100.0)
    assert "was not measured" in said and "did you time the round trip" not in said, said
    # with no band (factor inf: lab 01's runs besides the one nearest the course's time)
    # only the call bounds the time
    assert expect_timing(1e-5, 5.0, iters=200, elapsed_us=4100.0, factor=float("inf")) < 1e-5
    assert "round trip" in message(expect_timing, 20.0, 5.0, iters=200, elapsed_us=4100.0,
                                   factor=float("inf"))
    # the band speaks first: a whole loop's time is named as such
    assert "time of the whole loop" in message(expect_timing, 400 * 10.0, 10.0, iters=200,
                                                elapsed_us=4100.0)


def test_reload_restores_patched_helpers():
    grading.expect_equal = lambda *a, **k: None  # what a hostile submission does
    g = importlib.reload(grading)
    with pytest.raises(CheckFailed):
        g.expect_equal(1, 2)


# --------------------------------------------------------------------------------------
# build


PYX = r"""
# cython: boundscheck=False, wraparound=False
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport *


def shift(MPI.Comm comm not None, double[::1] send, double[::1] recv):
    cdef MPI_Comm c = comm.ob_mpi
    cdef int rank = comm.Get_rank(), size = comm.Get_size()
    cdef int n = send.shape[0]
    with nogil:
        MPI_Sendrecv(&send[0], n, MPI_DOUBLE, (rank + 1) % size, 0,
                     &recv[0], n, MPI_DOUBLE, (rank - 1 + size) % size, 0, c,
                     MPI_STATUS_IGNORE)
    return recv[0]
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("build-cache")


@mpi
def test_build_compiles_once_and_runs_on_the_engines(lab, cache):
    mod = build.cython(PYX, name="shift", cache=cache)
    assert not mod.cached and mod.path.exists()
    again = build.cython(PYX, name="shift", cache=cache)
    assert again.cached and again.path == mod.path

    def harness(comm, kernel):
        s = np.full(4, float(comm.Get_rank()))
        return kernel(comm, s, np.zeros(4))

    assert run_on_ranks(harness, mod.shift, ranks=3) == [2.0, 0.0, 1.0]


def test_build_defers_the_compile_in_the_students_kernel_at_autograde(tmp_path, monkeypatch):
    """At autograde the checks compile their own copy; the student's kernel compiles only
    what it uses itself (a pickled or called function, load())."""
    import pickle

    monkeypatch.setattr(build, "_DEFER", [False])  # this process's setting, restored after
    build.defer_compiles()  # as mpilab.autograder.student does in the student's kernel
    mod = build.cython(PYX, name="shift", cache=tmp_path)
    assert not mod.path.exists() and "compiled when first used" in repr(mod)
    fn = mod.shift
    assert not mod.path.exists()  # naming a function compiles nothing
    again = pickle.loads(pickle.dumps(fn))  # sending it to the ranks does
    assert mod.path.exists() and "compiled in" in repr(mod)
    assert again.path == str(mod.path) and again.fingerprint == fn.fingerprint
    broken = build.cython(PYX.replace("cdef int n = send.shape[0]", "cdef int n = "),
                          name="shift", cache=tmp_path)
    with pytest.raises(build.CompileError, match="shift.pyx:10:"):
        broken.load()


def test_build_defers_only_where_the_autograder_says_so():
    """build reads no grading switch: the student's kernel defers because the autograder's
    student module, imported there first, says so; importing build alone does not."""
    assert "MPILAB_GRAD" not in Path(build.__file__).read_text()
    code = ("import sys; from mpilab import build; a = build._DEFER[0]; "
            "import mpilab.autograder.student; print(a, build._DEFER[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "MPILAB_GRADING": "1"})
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_build_compile_error_is_the_compilers_message(cache):
    broken = PYX.replace("cdef int n = send.shape[0]", "cdef int n = ")
    with pytest.raises(build.CompileError) as info:
        build.cython(broken, name="shift", cache=cache)
    msg = str(info.value)
    assert "Cython could not compile shift.pyx" in msg
    assert "shift.pyx:10:" in msg and "Traceback" not in msg
    assert str(cache) not in msg  # no cache paths, just the student's file name


def test_build_wrong_call_points_at_the_line(cache):
    wrong = PYX.replace("MPI_Sendrecv(&send[0], n,", "MPI_Sendrecv(send, n,")
    with pytest.raises(build.CompileError, match="shift.pyx:12:"):
        build.cython(wrong, name="shift", cache=cache)


def test_build_refuses_bad_arguments():
    with pytest.raises(TypeError):
        build.cython(b"bytes", name="x")
    with pytest.raises(ValueError):
        build.cython("x = 1", name="not an identifier")
