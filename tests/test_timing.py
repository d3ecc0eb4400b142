"""The timing protocol (mpilab.timing): its records by arithmetic, and its repetitions on a
real cluster's ranks. The ping-pong's own tests are tests/test_pingpong.py."""

import sys

import cloudpickle
import pytest

from mpilab import timing

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # its functions run on the ranks


def test_summary_arithmetic():
    r = timing.record([1e-6, 2e-6, 3e-6, 4e-6, 5e-6], size_bytes=3000, impl="x")
    assert r["t_us_min"] == pytest.approx(1.0) and r["t_us_max"] == pytest.approx(5.0)
    assert r["t_us_median"] == pytest.approx(3.0)
    assert (r["t_us_q1"], r["t_us_q3"]) == (pytest.approx(2.0), pytest.approx(4.0))
    assert r["spread"] == pytest.approx(2.0 / 3.0)
    assert r["bandwidth_MBps"] == pytest.approx(1000.0)  # 3000 B in 3 us
    assert r["reps"] == 5 and r["times_us"] == pytest.approx([1, 2, 3, 4, 5])
    with pytest.raises(ValueError):
        timing.summarize([])
    with pytest.raises(ValueError):
        timing.summarize([1.0, float("nan")])


def _protocol_on_a_rank(reps: int, iters: int) -> tuple:
    from mpi4py import MPI

    from mpilab import timing

    comm, calls = MPI.COMM_WORLD, []

    def op():
        calls.append(1)
        comm.Barrier()

    times = timing.rep_times(comm, op, iters, reps)
    return times, len(calls), timing.best_us(comm, comm.Barrier, 2, 3)


def test_the_timing_protocol_on_the_ranks(lab):
    """One untimed call, then `reps` repetitions of `iters` calls each; every rank holds
    the same times (the slowest rank's); best_us is a positive time, the same everywhere."""
    got = lab.run(_protocol_on_a_rank, 4, 3, timeout=60)
    times, calls, best = got[0]
    assert len(times) == 4 and all(t > 0 for t in times)
    assert all(g[0] == times for g in got)
    assert all(g[1] == 1 + 4 * 3 for g in got)
    assert best > 0 and all(g[2] == best for g in got)
