"""The ping-pong's timed loops, on the ranks (collective: every rank of the communicator
calls them, and every rank returns the same records or numbers).

Two implementations of one protocol (``kernels/common/mpilab_timing.h``): warm-up steps
discarded, ``MPI_Barrier``, the timed loop, ``MPI_Wtime``, the slowest rank's time
(``MPI_MAX``), repetitions summarised as min / quartiles / median
(:func:`mpilab.timing.record`). ``"kernel"`` is the compiled C loop
(:mod:`mpilab.kernels.pingpong`), which is what the course measures; ``"mpi4py"``
(:func:`_mpi4py_pingpong`) is the same steps in Python with mpi4py's buffer
``Send``/``Recv`` of NumPy arrays. Why that second loop is kept is in the package's
docstring (:mod:`mpilab.pingpong`): lecture 01 compares the two, and :func:`one_way_times`
and :func:`alpha_beta` (labs 00 and 01's graders) time the path the students' code takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .. import validate
from ..buffers import BUFFER_KINDS, doubles, huge_page_share, send_and_receive
from ..timing import best_us, pinned, record

IMPLS = ("kernel", "mpi4py")
MODES = ("roundtrip", "oneway", "window")
#: osu_bw's window: messages posted at once before one wait (the kernel's PP_WINDOW)
WINDOW = 64


def round_trip(comm, out, into, times: int = 1):
    """A function of no argument: `times` round trips of `out` between ranks 0 and 1 of
    `comm`, each answered from `into` once it has arrived (the other ranks do nothing).
    With `out` and `into` the same array each rank sends on what it has just received.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (2 ranks or more; only ranks 0 and 1 take part).
    out, into : numpy.ndarray
        The array sent, and the array received into (same size).
    times : int, optional
        Round trips per call (default 1).

    Returns
    -------
    callable
        A function of no argument that every rank of `comm` calls.
    """
    rank = comm.Get_rank()

    def go():
        for _ in range(times):
            if rank == 0:
                comm.Send(out, dest=1)
                comm.Recv(into, source=1)
            elif rank == 1:
                comm.Recv(into, source=0)
                comm.Send(out, dest=0)

    return go


def _mpi4py_pingpong(comm, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters, reps):
    """The kernel's protocol with mpi4py's buffer Send/Recv (NumPy, no pickling): the
    path the students' code takes, which lecture 01 compares with the C loop and lab 01
    grades the students' ping-pong against (see :mod:`mpilab.pingpong`)."""
    from mpi4py import MPI

    me = comm.Get_rank()
    sb, rb = [sbuf, nbytes, MPI.BYTE], [rbuf, nbytes, MPI.BYTE]

    def roundtrip(k):
        for _ in range(k):
            if me == rank_a:
                comm.Send(sb, rank_b, 17)
                comm.Recv(rb, rank_b, 17)
            elif me == rank_b:
                comm.Recv(rb, rank_a, 17)
                comm.Send(sb, rank_a, 17)

    def oneway(k):
        if me == rank_a:
            for _ in range(k):
                comm.Send(sb, rank_b, 17)
            comm.Recv([rbuf, 0, MPI.BYTE], rank_b, 18)
        elif me == rank_b:
            for _ in range(k):
                comm.Recv(rb, rank_a, 17)
            comm.Send([sbuf, 0, MPI.BYTE], rank_a, 18)

    ack = np.zeros(4, dtype=np.uint8)

    def window(k):
        done = 0
        while done < k:
            w = min(WINDOW, k - done)
            if me == rank_a:
                MPI.Request.Waitall([comm.Isend(sb, rank_b, 17) for _ in range(w)])
                comm.Recv([ack, 4, MPI.BYTE], rank_b, 18)
            elif me == rank_b:
                MPI.Request.Waitall([comm.Irecv(rb, rank_a, 17) for _ in range(w)])
                comm.Send([ack, 4, MPI.BYTE], rank_a, 18)
            done += w

    if mode in ("oneway", "window"):
        burst = oneway if mode == "oneway" else window
        if warmup:
            burst(min(warmup, iters))
        step, per, count = burst, iters, iters
    else:
        roundtrip(warmup)
        step, per, count = roundtrip, 2 * iters, iters
    out = np.empty(reps)
    for r in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        step(count)
        local = MPI.Wtime() - t0
        out[r] = comm.allreduce(local, op=MPI.MAX) / per
    return out


def _run_pingpong(comm, impl, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters, reps):
    if impl == "kernel":
        from ..kernels import pingpong as k

        return k.pingpong(comm, sbuf, rbuf, nbytes, rank_a=rank_a, rank_b=rank_b, mode=mode,
                          warmup=warmup, iters=iters, reps=reps)
    if impl == "mpi4py":
        return _mpi4py_pingpong(comm, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters,
                                reps)
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


def calibrate_iters(comm, nbytes: int, *, min_time: float = 0.01, mode: str = "roundtrip",
                    rank_a: int = 0, rank_b: int = 1, max_iters: int = 1_000_000) -> int:
    """Timed iterations for one repetition to last about `min_time` seconds (collective).

    Every rank gets the same answer, because the kernel returns the slowest rank's time.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; every rank calls this.
    nbytes : int
        Message size, in bytes.
    min_time : float, optional
        Seconds one repetition should last (default 0.01).
    mode : {"roundtrip", "oneway", "window"}, optional
        The ping-pong's pattern (see :func:`measure_pingpong`).
    rank_a, rank_b : int, optional
        The two ranks that exchange messages (default 0 and 1).
    max_iters : int, optional
        The most iterations returned (default 1,000,000).

    Returns
    -------
    int
        Timed iterations per repetition, between 1 and `max_iters`.
    """
    s, r = send_and_receive(nbytes, comm.Get_rank())
    iters = 1
    while True:
        # best of 3: one preemption must not make the count tiny
        t = _run_pingpong(comm, "kernel", s, r, nbytes, rank_a, rank_b, mode, 2, iters, 3).min()
        per_rep = t * (2 if mode == "roundtrip" else 1) * iters
        if per_rep >= min_time / 4 or iters >= max_iters:
            want = iters * min_time / max(per_rep, 1e-9)
            return int(min(max_iters, max(1, round(want))))
        iters = min(max_iters, iters * 8)


def measure_pingpong(comm, sizes: Iterable[int], *, impls: Sequence[str] = ("kernel",),
                     mode: str = "roundtrip", reps: int = 7, warmup: int | None = None,
                     iters: dict | int | None = None, min_time: float = 0.01,
                     rank_a: int = 0, rank_b: int = 1, rounds: int = 1,
                     buffers: str = "huge-pages") -> list[dict]:
    """Ping-pong records for each size and implementation (collective over `comm`).

    Implementations are measured side by side: for each size, `rounds` rounds each run
    every implementation for `reps` repetitions, and their timings are pooled.
    `iters` fixes the timed iterations (per size with a dict); by default they are
    calibrated so one repetition lasts about `min_time` seconds. `buffers` is the kind
    of memory the messages live in (:data:`mpilab.buffers.BUFFER_KINDS`, the same at every
    size); records say it, and how much of the two buffers sits on huge pages (the smaller
    share of the pair, :func:`mpilab.buffers.huge_page_share`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (ranks `rank_a` and `rank_b` exchange; the others wait).
    sizes : iterable of int
        Message sizes, in bytes (0 or more).
    impls : sequence of {"kernel", "mpi4py"}, optional
        The compiled C kernel, mpi4py's buffer ``Send``/``Recv``, or both.
    mode : {"roundtrip", "oneway", "window"}, optional
        ``roundtrip``: half a round trip per message; ``oneway``: a stream of messages
        and one acknowledgement; ``window``: ``WINDOW`` messages posted at once, then
        one acknowledgement (osu_bw's pattern).
    reps : int, optional
        Repetitions per round and implementation (default 7).
    warmup : int, optional
        Untimed iterations first; None: as many as the timed ones, 100 at most.
    iters : int or dict of int to int, optional
        Timed iterations per repetition, or per size; None (or a size missing from the
        dict): calibrated with :func:`calibrate_iters`.
    min_time : float, optional
        Seconds one repetition should last when calibrated (default 0.01).
    rank_a, rank_b : int, optional
        The two ranks that exchange messages (default 0 and 1).
    rounds : int, optional
        Rounds over the implementations, pooled (default 1).
    buffers : {"huge-pages", "numpy", "4k-pages"}, optional
        The memory the messages live in.

    Returns
    -------
    list of dict
        One :func:`record` per size and implementation (``impl``, ``mode``, ``iters``,
        ``warmup``, ``buffer``, ``huge_page_share``; times per message, µs), the same on
        every rank.

    Raises
    ------
    ValueError
        An unknown `buffers`, `mode` or implementation, or a negative size.
    """
    if buffers not in BUFFER_KINDS:
        raise ValueError(f"buffers must be one of {BUFFER_KINDS}, got {buffers!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for impl in impls:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    out = []
    for n in sizes:
        n = int(n)
        if n < 0:
            raise ValueError(f"message sizes must be >= 0, got {n}")
        s, r = send_and_receive(n, comm.Get_rank(), buffers)
        shares = [x for x in (huge_page_share(s), huge_page_share(r)) if x is not None]
        share = min(shares) if shares else None
        it = (iters.get(n) if isinstance(iters, dict) else iters) or calibrate_iters(
            comm, n, min_time=min_time, mode=mode, rank_a=rank_a, rank_b=rank_b)
        wu = warmup if warmup is not None else max(1, min(it, 100))
        pooled = {impl: [] for impl in impls}
        for _ in range(rounds):
            for impl in impls:
                pooled[impl].extend(_run_pingpong(comm, impl, s, r, n, rank_a, rank_b, mode,
                                                  wu, it, reps))
        for impl in impls:
            out.append(record(pooled[impl], size_bytes=n, impl=impl, mode=mode, iters=it,
                              warmup=wu, buffer=buffers, huge_page_share=share))
    return out


def forwarding_times(comm, nbytes: int = 1 << 20, reps: int = 15, *,
                     extra: dict | None = None) -> dict:
    """On every rank of `comm`: where the bytes of a large message were, and what that
    costs. One loop times each operation once per repetition, so a change of the
    machine's state during the loop reaches all of them alike; each result is the fastest
    of `reps`, in µs, the slowest rank's, every rank on a core of its own where there are
    cores enough (:func:`mpilab.timing.pinned`), every buffer on huge pages
    (:func:`mpilab.buffers.doubles`):

    * ``alpha_us``: half a round trip of 8 B between ranks 0 and 1 (a loop of 20);
    * ``resent_us``: one way of `nbytes` by a ping-pong that sends the same array every
      time, as ping-pong benchmarks do: after the first, the receiving core holds the
      array in its cache;
    * ``forwarded_us``: one way of `nbytes` by a ping-pong in which each of the two ranks
      sends on the array it has just received, as a ring or a tree does: the array sits,
      just written, in the sending core's cache, and the receiver's copy (Open MPI's
      single copy) must fetch every line from there;
    * ``{name}_us`` for each of `extra` (name: a function of no argument that every rank
      calls, a collective operation), one call from a barrier to the slowest rank: lab 06
      times the course's allgathers in the same loop.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (2 ranks or more); collective: every rank calls this.
    nbytes : int, optional
        The large message's size, in bytes (default 1 MiB; at least 8).
    reps : int, optional
        Repetitions; each result is the fastest (default 15).
    extra : dict of str to callable, optional
        More operations to time in the same loop, by name.

    Returns
    -------
    dict
        ``alpha_us``, ``resent_us``, ``forwarded_us`` and one ``{name}_us`` per `extra`
        (µs), with ``nbytes`` and ``ranks`` (the size of `comm`); the same on every rank.

    Raises
    ------
    ValueError
        `comm` has a single rank, or `nbytes` or `reps` is out of range.
    """
    from mpi4py import MPI

    r, p = comm.Get_rank(), comm.Get_size()
    if p < 2:
        raise ValueError(f"forwarding_times needs 2 ranks or more, got {p}")
    validate.count(nbytes, "nbytes", lowest=8)
    validate.count(reps, "reps")

    n = max(1, int(nbytes) // 8)
    tiny, tiny_in = doubles(1), doubles(1, 0.0)
    out, into, potato = doubles(n), doubles(n, 0.0), doubles(n, float(r))
    ops = {"alpha": (round_trip(comm, tiny, tiny_in, 20), 40),
           "resent": (round_trip(comm, out, into), 2),
           "forwarded": (round_trip(comm, potato, potato), 2)}
    for name, op in (extra or {}).items():
        ops[name] = (op, 1)
    best = dict.fromkeys(ops, float("inf"))
    with pinned(comm):
        for op, _ in ops.values():  # warm-up: connections, first touch of the pages
            comm.Barrier()
            op()
        for _ in range(reps):
            for name, (op, per) in ops.items():
                comm.Barrier()
                t0 = MPI.Wtime()
                op()
                best[name] = min(best[name],
                                 comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX) / per)
    got = {f"{k}_us": v * 1e6 for k, v in best.items()}
    return {**got, "nbytes": int(nbytes), "ranks": p}


#: A repetition of :func:`one_way_times` sends at most this many bytes each way: a
#: repetition that lasts longer than a scheduler's time slice is cut by it whenever other
#: processes share the cores, and then every repetition is, and the best is no better.
#: On the course's 2-core VM beside 2 busy processes (2026-11-28), 10 round trips of 4 MiB
#: a repetition gave 507-515 µs one way against 300-322 alone; one round trip a
#: repetition gave 308-315 µs beside them, as alone.
REP_BYTES = 1 << 20


def one_way_times(comm, sizes, iters: int = 10, reps: int = 7) -> dict:
    """On every rank of `comm`: the one-way time (µs, half a round trip, the best of the
    repetitions) of each of `sizes` bytes between ranks 0 and 1, with ``Send``/``Recv`` of
    NumPy arrays as the labs' own code sends, on memory of one kind
    (:func:`mpilab.buffers.doubles`), timed by :func:`mpilab.timing.best_us`.

    A size of more than :data:`REP_BYTES` / `iters` bytes times fewer round trips a
    repetition (down to one, so that a repetition stays short) in more repetitions (up to
    three times `reps`, about as many round trips in all).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The measuring ranks' communicator (ranks 0 and 1 ping-pong; others wait).
    sizes : sequence of int
        Message sizes, bytes (multiples of 8).
    iters, reps : int, optional
        Round trips timed back to back per repetition, and repetitions, of the small
        sizes (defaults 10 and 7).

    Returns
    -------
    dict
        ``sizes`` (bytes) and ``t_us``: the one-way time of each, µs.
    """
    iters, reps = validate.count(iters, "iters"), validate.count(reps, "reps")

    def one_way(nbytes: int) -> float:
        out, into = doubles(nbytes // 8), doubles(nbytes // 8, 0.0)
        k = max(1, min(iters, REP_BYTES // max(nbytes, 1)))
        r = min(3 * reps, -(-iters * reps // k))
        return best_us(comm, round_trip(comm, out, into), k, r) / 2

    return {"sizes": [int(n) for n in sizes], "t_us": [one_way(int(n)) for n in sizes]}


def alpha_beta(comm, big_bytes: int = 1 << 20, iters: int = 10, reps: int = 7) -> dict:
    """On every rank of `comm`: Hockney's α (the one-way time of 8 B, µs) and β (MB/s, from
    the one-way time of `big_bytes`: β = n / (t(n) - α)), by a ping-pong of ranks 0 and 1
    (:func:`one_way_times`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The measuring ranks' communicator.
    big_bytes : int, optional
        The large message β comes from, bytes (default 1 MiB).
    iters, reps : int, optional
        As for :func:`one_way_times`.

    Returns
    -------
    dict
        ``alpha_us`` (µs), ``t_big_us`` (µs), ``big_bytes`` and ``beta_MBps`` (MB/s).
    """
    alpha, t_big = one_way_times(comm, [8, big_bytes], iters, reps)["t_us"]
    return {"alpha_us": alpha, "t_big_us": t_big, "big_bytes": big_bytes,
            "beta_MBps": big_bytes / max(t_big - alpha, 1e-3)}
