"""The matching kernel under mpiexec at an explicit rank count (see tests/test_matching.py).

Every rank runs every check; a failure prints "FAIL <check>: <why>" and exits 1. The
kernel checks itself after the timed messages (the queued entries by their tags, one
more message byte for byte): these checks read that count, and show it can fail.
"""

import numpy as np
from mpicheck import check, comm, finish, raises, rank, size

from mpilab.kernels import matching


def pattern(n, seed=3):
    return ((np.arange(n) * 7 + seed) % 251).astype(np.uint8)


@check
def every_queue_and_wildcard_delivers_intact():
    for queue in ("posted", "unexpected"):
        for wildcard in ("none", "source"):
            for depth in (0, 1, 37, 300):
                for n in (0, 8, 5000, 70000):  # 5000 B and up: rendezvous on shared memory
                    s, r = pattern(n + 8), np.full(n + 8, 0xEE, np.uint8)
                    t, bad = matching.matching(comm, s, r, depth, n, queue=queue,
                                               wildcard=wildcard, warmup=1, iters=3, reps=2)
                    what = f"{queue}/{wildcard} depth {depth}, {n} B"
                    assert bad == 0, f"{what}: {bad} messages arrived wrong"
                    assert t.shape == (2,) and np.all(t > 0), f"{what}: times {t}"
                    every = comm.allgather(t.tolist())
                    assert all(x == every[0] for x in every), f"{what}: ranks disagree"
                    if rank in (0, 1):
                        assert np.array_equal(r[:n], s[:n]), f"{what}: data differs"
                        assert np.all(r[n:] == 0xEE), f"{what}: bytes past nbytes written"
                    else:
                        assert np.all(r == 0xEE), f"{what}: an idle rank's buffer was written"


@check
def another_pair_and_late_receivers():
    a, b = (size - 1, 0) if size > 2 else (1, 0)
    s, r = pattern(64), np.zeros(64, np.uint8)
    _, bad = matching.matching(comm, s, r, 50, queue="posted", rank_a=a, rank_b=b, iters=5,
                               reps=1)
    assert bad == 0, f"posted, ranks {a} and {b}: {bad} wrong"
    for queue in ("late", "late-polling"):
        for n in (8, 1024, 65536):
            s, r = pattern(n), np.zeros(n, np.uint8)
            t, bad = matching.matching(comm, s, r, 0, queue=queue, delay_us=20.0, warmup=1,
                                       iters=3, reps=2)
            assert bad == 0 and np.all(t >= 0), f"{queue} {n} B: bad {bad}, times {t}"
            if rank == 1:
                assert np.array_equal(r, s), f"{queue} {n} B: data differs"


@check
def the_check_sees_a_wrong_message():
    # rank 0's and rank 1's messages differ: the checked message differs from the
    # receiver's own copy of sbuf, and the kernel counts it, one per receiving rank
    s = pattern(256, seed=rank + 1)
    r = np.zeros(256, np.uint8)
    for queue, receivers in (("unexpected", (0, 1)), ("posted", (0, 1)), ("late", (1,))):
        _, bad = matching.matching(comm, s, r, 0 if queue == "late" else 10, queue=queue,
                                   iters=2, reps=1)
        want = 1 if rank in receivers else 0
        assert bad == want, f"{queue}: a wrong message counted {bad} times on rank {rank}"


@check
def bad_arguments_raise_before_mpi():
    s, r = np.zeros(16, np.uint8), np.zeros(16, np.uint8)
    raises(ValueError, matching.matching, comm, s, r, -1)
    raises(ValueError, matching.matching, comm, s, r, matching.MAX_DEPTH + 1)
    raises(ValueError, matching.matching, comm, s, r, 3, queue="late")
    raises(ValueError, matching.matching, comm, s, r, 3, queue="nowhere")
    raises(ValueError, matching.matching, comm, s, r, 3, wildcard="tag")
    raises(ValueError, matching.matching, comm, s, r, 3, 17)
    raises(ValueError, matching.matching, comm, s, r, 0, queue="late", delay_us=-1.0)
    raises(ValueError, matching.matching, comm, s, r, 3, rank_a=size)
    raises(ValueError, matching.matching, comm, s, r, 3, rank_a=1, rank_b=1)
    raises(ValueError, matching.matching, comm, s, r, 3, iters=0)
    raises(TypeError, matching.matching, comm, None, r, 3)
    raises(TypeError, matching.matching, comm, s, bytes(16), 3)


finish()
