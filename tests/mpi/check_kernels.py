"""Kernel checks run under mpiexec at an explicit rank count (see tests/test_kernels.py).

Every rank runs every check; a failure prints "FAIL <check>: <why>" and the process
exits 1. Argument errors are raised before any MPI call on every rank alike, so they
cannot leave a rank waiting.
"""

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, finish, raises, rank, size

from mpilab.kernels import memcopy, pingpong


def pattern(n, seed):
    return ((np.arange(n) * 7 + seed) % 251).astype(np.uint8)


SIZES = [0, 1, 7, 8, 4096, 4097, 65537, (1 << 20) + 3]


@check
def roundtrip_integrity():
    for n in SIZES:
        s = pattern(n + 16, seed=rank + 1)
        r = np.full(n + 16, 0xEE, np.uint8)
        t = pingpong.pingpong(comm, s, r, n, warmup=0, iters=1, reps=1)
        assert t.shape == (1,) and t[0] > 0
        if rank == 0:
            assert np.array_equal(r[:n], pattern(n + 16, 2)[:n]), f"rank 0 got wrong data, n={n}"
        if rank == 1:
            assert np.array_equal(r[:n], pattern(n + 16, 1)[:n]), f"rank 1 got wrong data, n={n}"
        if rank in (0, 1):
            assert np.all(r[n:] == 0xEE), f"bytes past nbytes={n} were written"
        else:
            assert np.all(r == 0xEE), "an idle rank's buffer was written"


@check
def oneway_integrity_and_other_pair():
    a, b = (size - 1, 0) if size > 2 else (1, 0)
    for n in (8, 70000):
        s = pattern(n, seed=10 * rank + 3)
        r = np.zeros(n, np.uint8)
        pingpong.pingpong(comm, s, r, mode="oneway", rank_a=a, rank_b=b, warmup=2, iters=5,
                          reps=2)
        if rank == b:
            assert np.array_equal(r, pattern(n, 10 * a + 3)), "one-way data corrupted"


@check
def times_identical_on_every_rank():
    s, r = np.ones(64, np.uint8), np.zeros(64, np.uint8)
    t = pingpong.pingpong(comm, s, r, warmup=5, iters=50, reps=3)
    every = comm.allgather(t.tolist())
    assert all(x == every[0] for x in every), f"ranks disagree: {every}"
    assert np.all(t > 0) and np.all(t < 1.0)


@check
def other_buffer_types():
    s = np.arange(10, dtype=np.float64) + rank
    r = np.zeros(10)
    pingpong.pingpong(comm, s, r, warmup=0, iters=1, reps=1)  # nbytes defaults to 80
    if rank == 1:
        assert np.array_equal(r, np.arange(10.0)), r
    pingpong.pingpong(comm, bytes(16), bytearray(16), 16, iters=1, reps=1)  # read-only sbuf ok


@check
def memcopy_copies():
    for method in ("loop", "memcpy"):
        for n in (0, 1, 1000, 123457):
            src = np.random.default_rng(n).random(n)
            dst = np.zeros(n)
            t = memcopy.memcopy(comm, dst, src, method=method, warmup=1, iters=3, reps=2)
            assert np.array_equal(dst, src) and t.shape == (2,) and np.all(t >= 0)


@check
def argument_errors():
    s, r = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    pp = pingpong.pingpong
    raises(ValueError, pp, MPI.COMM_SELF, s, r)                # 1 rank
    raises(TypeError, pp, None, s, r)                          # no communicator
    raises(ValueError, pp, comm, s, r, 9)                      # larger than buffers
    raises(ValueError, pp, comm, s, r, -1)
    raises(TypeError, pp, comm, s, r, 2.5)
    raises(ValueError, pp, comm, s, r, rank_a=1, rank_b=1)
    raises(ValueError, pp, comm, s, r, rank_b=size)
    raises(ValueError, pp, comm, s, r, rank_a=-1)
    raises(ValueError, pp, comm, s, r, mode="sideways")
    raises(ValueError, pp, comm, s, r, iters=0)
    raises(ValueError, pp, comm, s, r, reps=0)
    raises(ValueError, pp, comm, s, r, warmup=-1)
    raises(TypeError, pp, comm, None, r)
    # MPI's counts are C ints: the kernels call no MPI-4 "_c" function, so a message of
    # 2**31 bytes or more is refused by name, before its buffers are even compared
    try:
        pp(comm, s, r, 1 << 31)
    except ValueError as exc:
        assert "between 0 and 2147483647" in str(exc), exc
    else:
        raise AssertionError("a 2 GiB message was not refused")
    raises(TypeError, pp, comm, s, b"read-only")               # rbuf must be writable
    raises(TypeError, pp, comm, np.zeros((4, 4), np.uint8)[:, 0], r)  # not contiguous
    raises(TypeError, pp, comm, object(), r)
    mc = memcopy.memcopy
    a = np.zeros(100)
    raises(ValueError, mc, comm, a[:50], a[25:75])             # overlapping
    raises(ValueError, mc, comm, np.zeros(3), np.zeros(4))
    raises(ValueError, mc, comm, np.zeros(3, np.float32), np.zeros(3, np.float32))
    raises(ValueError, mc, comm, np.zeros(3), np.zeros(3), method="teleport")
    raises(TypeError, mc, comm, None, np.zeros(3))
    raises(ValueError, mc, comm, np.zeros(3), np.zeros(3), iters=0)


finish(together=True)
