# cython: language_level=3, boundscheck=False, wraparound=False
"""A ping-pong past a queue of posted receives or unexpected messages, and a receiver that
posts late, timed inside C (see c_matching.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_matching as c
import numpy as np

include "mpilab_buffers.pxi"

QUEUES = {"posted": c.MPILAB_MATCH_POSTED, "unexpected": c.MPILAB_MATCH_UNEXPECTED,
          "late": c.MPILAB_MATCH_LATE, "late-polling": c.MPILAB_MATCH_LATE_POLLING}
WILDCARDS = {"none": c.MPILAB_WILD_NONE, "source": c.MPILAB_WILD_SOURCE}
MAX_DEPTH = c.MPILAB_MATCH_MAX_DEPTH


def matching(MPI.Comm comm not None, sbuf, rbuf, int depth, nbytes=None, *,
             queue="unexpected", wildcard="none", double delay_us=0.0, rank_a=0, rank_b=1,
             warmup=10, iters=100, reps=5):
    """Time messages of `nbytes` between `rank_a` and `rank_b` past `depth` queued entries.

    Collective over `comm`. `queue` "posted" (each of the two ranks first posts `depth`
    receives the ping-pong never matches) or "unexpected" (each first sends the other
    `depth` messages it does not receive yet): round trips of `nbytes`, seconds per
    one-way message. "late" or "late-polling" (`depth` 0): `rank_b` posts its receive
    `delay_us` after `rank_a`'s send starts, computing outside MPI or polling inside it
    meanwhile; seconds `rank_a` spent in ``MPI_Send``. `wildcard` "source": the posted
    receives take ``MPI_ANY_SOURCE``. `sbuf` holds the same bytes on both ranks; `sbuf`
    and `rbuf` are distinct, of at least `nbytes` (default: the size of `sbuf`).

    Returns ``(times, bad)``: a float64 array of `reps` times, the slowest rank's,
    identical on every rank, and on `rank_a` and `rank_b` the messages that arrived wrong
    when checked after the timed ones (the queued entries, each by its tag, and one more
    message of `nbytes`); 0 elsewhere.
    """
    cdef const unsigned char[::1] s
    cdef unsigned char[::1] r
    cdef double[::1] t
    cdef const void *sp = NULL
    cdef void *rp = NULL
    cdef int err, bad = 0, n, a, b, q, w, wu, it, rp_

    cdef MPI_Comm cc = comm.ob_mpi
    if queue not in QUEUES:
        raise ValueError(f"queue must be one of {sorted(QUEUES)}, got {queue!r}")
    if wildcard not in WILDCARDS:
        raise ValueError(f"wildcard must be one of {sorted(WILDCARDS)}, got {wildcard!r}")
    _check_count(depth, "depth", 0)
    if depth > MAX_DEPTH:
        raise ValueError(f"depth must be at most {MAX_DEPTH} (the queued entries' tags stay "
                         f"below 32767), got {depth}")
    if queue.startswith("late") and depth != 0:
        raise ValueError(f"queue {queue!r} queues nothing: depth must be 0, got {depth}")
    if not delay_us >= 0 or delay_us > 1e7:
        raise ValueError(f"delay_us must be between 0 and 1e7 µs, got {delay_us}")
    sv, rv, nbytes = _pair_args(comm, sbuf, rbuf, nbytes, rank_a, rank_b, warmup, iters,
                                reps, "matching")

    times = np.empty(reps, dtype=np.float64)
    t = times
    if nbytes > 0:
        s = sv
        r = rv
        sp = &s[0]
        rp = &r[0]
    n, a, b, q, w = nbytes, rank_a, rank_b, QUEUES[queue], WILDCARDS[wildcard]
    wu, it, rp_ = warmup, iters, reps
    with nogil:
        err = c.mpilab_matching(cc, a, b, depth, n, q, w, delay_us, sp, rp, wu, it, rp_,
                                &t[0], &bad)
    _check_mpi(err)
    return times, bad
