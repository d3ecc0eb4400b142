"""The measurements the labs' graded predictions are graded against, made on the ranks.

A graded prediction (:mod:`mpilab.grading.prediction`: the shape, and the comparisons
with the model and with the measurement) is graded against a **fresh measurement** of the
same operation, made here: :func:`measure` (and :func:`with_alpha_beta`) run a timed
function of the course on the ranks, timed by :func:`mpilab.timing.best_us`. Lab 00's
prediction (a lap and a shift of the ring) is declared here too, as :data:`RING`; lab 01's
(held-out ping-pong sizes) is :mod:`mpilab.grading.pingpong`'s.

The measurements run where the check runs, made by the course's own code, never the
student's: at autograde time that is the grader's kernel. One measurement serves a whole
``nbgrader autograde`` run (:func:`cached`: kept in this kernel and, for
:data:`CACHE_SECONDS`, in a folder only this user can write), so a class is graded
against one measurement, not one each.

How many ranks a measured case uses comes from the machine (:func:`measuring_ranks`): as
many as there are cores, up to the cluster's size, at least 2; a result says when that
was fewer than the lab's cluster, so a number from a 2-core laptop is never mistaken for
one on 8 cores.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import runtime
from ..autograder import quiet
from ..autograder.failures import Ungradable, fail
from ..buffers import doubles
from ..pingpong import alpha_beta, round_trip
from ..timing import best_us
from . import steady
from .compare import _fmt, _is_num
from .prediction import Part, Prediction, expect_model, expect_prediction, shown, where

__all__ = ["CACHE_SECONDS", "cached", "cache_dir", "own_session", "measuring_ranks",
           "measure", "waited", "WAITED",
           "with_alpha_beta", "expect_prediction", "expect_model", "where",
           # lab 00
           "ring_times", "ring_now", "check_ring_times", "show_ring_times"]

#: A measurement or a traced schedule is made once per grading session: kept in this
#: kernel, and in a folder only this user can write, for this many seconds, so the
#: notebooks of one ``nbgrader autograde`` run share one measurement.
CACHE_SECONDS = 900
_CACHE: dict = {}


def cache_dir() -> Path | None:
    """This user's cache folder, or None where it is not safely this user's alone.

    Returns
    -------
    Path or None
        The folder where measurements are kept between the notebooks of one grading
        session (:func:`mpilab.autograder.quiet.folder`), or None: then they are kept in
        this kernel only.
    """
    return quiet.folder()


_MISSING = object()

#: the key under which :func:`own_session` keeps why its measurement could not be made
UNGRADABLE = "ungradable"


#: what a kept measurement's file name ends with (a simulation's or a trace's: ``.json``):
#: a test session that measures removes these first (tests/conftest.py)
MEASURED_SUFFIX = ".measured.json"


def _file(d: Path, name: str, measures: bool) -> Path:
    return d / f"{name}{MEASURED_SUFFIX if measures else '.json'}"


def _lookup(name: str, measures: bool = False):
    if name in _CACHE:
        return _CACHE[name]
    d = cache_dir()
    path = _file(d, name, measures) if d else None
    if path is not None and path.exists() and time.time() - path.stat().st_mtime < CACHE_SECONDS:
        try:
            _CACHE[name] = json.loads(path.read_text())
            return _CACHE[name]
        except (OSError, ValueError):
            pass
    return _MISSING


@contextlib.contextmanager
def _making(name: str):
    """One maker of `name` at a time among this user's gradings (a lock file beside it)."""
    d = cache_dir()
    if d is None:
        yield
        return
    with open(d / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


#: the sessions of their own open in this process, innermost last (:func:`own_session`)
_OWN: list[dict] = []


@contextlib.contextmanager
def own_session():
    """A grading session of its own: what is measured inside is measured anew.

    Inside, :func:`cached` with ``measures`` neither reads the measurements that gradings
    share (this kernel's and :func:`cache_dir`'s) nor keeps its own there: each is made
    once, under the grading lock as always, and serves only the calls inside the block.
    Values that are not measured (simulations, traces) are cached as usual. A measurement
    that could not be made (:class:`~mpilab.autograder.failures.Ungradable`: its rounds
    never agreed, say) is kept as ``{UNGRADABLE: reason}``, and every later check of the
    session that needs it is ungradable for that reason, as the checks of one session
    share one measurement. The error-rate
    bench (:mod:`mpilab.grading.error_rates`) grades each repetition in one, so every
    repetition is graded against a fresh measurement, as each ``nbgrader autograde``
    session is.

    Yields
    ------
    dict
        The measurements made inside, by their keys (plain JSON data), filled as they
        are made.
    """
    own: dict = {}
    _OWN.append(own)
    try:
        yield own
    finally:
        _OWN[:] = [o for o in _OWN if o is not own]  # by identity: empty dicts are equal


def cached(name: str, make: Callable[[], Any], *, measures: bool = False):
    """`make()`, or what it gave less than :data:`CACHE_SECONDS` ago in this session.

    `make` must return plain JSON data. A grading running beside this one that needs the
    same value waits for it instead of making its own (three gradings of lab 06 starting
    together each ran the same simulations: 120 s each instead of 26). With `measures`,
    `make` times something: it runs with the cores held
    (:func:`mpilab.autograder.quiet.measuring`); otherwise it shares them
    (:func:`~mpilab.autograder.quiet.working`).

    Parameters
    ----------
    name : str
        The key the value is kept under (also its file's name in :func:`cache_dir`).
    make : callable
        Called with no arguments to make the value when none is kept.
    measures : bool, optional
        Whether `make` times something (default False): then it holds the cores.

    Returns
    -------
    object
        The plain JSON data `make` returned, now or in this session.

    Raises
    ------
    Ungradable
        What `make` raised: outside :func:`own_session` it is not kept, and the next call
        (the next notebook of the grading session) measures again.
    """
    if measures and _OWN:  # a session of its own (own_session): measured anew, kept there
        own = _OWN[-1]
        if name not in own:
            with quiet.measuring():
                try:
                    own[name] = make()
                except Ungradable as exc:  # the session's measurement: none, and why
                    own[name] = {UNGRADABLE: str(exc)}
        if isinstance(own[name], dict) and UNGRADABLE in own[name]:
            fail(Ungradable(own[name][UNGRADABLE]))
        return own[name]
    got = _lookup(name, measures)
    if got is not _MISSING:
        return got
    # a measurement holds the cores; a simulation or a trace, one maker at a time, shares
    # them (it keeps them busy: not while another grading measures)
    one_maker, cores = ((quiet.measuring(), contextlib.nullcontext()) if measures
                        else (_making(name), quiet.working()))
    with one_maker:
        got = _lookup(name, measures)  # made meanwhile by a grading beside this one
        if got is not _MISSING:
            return got
        with cores:
            value = make()
        d = cache_dir()  # kept before the cores are let go: a grading waiting reads it
        if d is not None:
            path = _file(d, name, measures)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(value))
            tmp.replace(path)
    _CACHE[name] = value
    return value


def measuring_ranks(ranks: int, cores: int | None = None) -> int:
    """Ranks for a measured case: one per usable core, at most `ranks`, at least 2.

    A timing with more ranks than cores measures the scheduler, not MPI; with fewer than
    two there is nothing to send. On one core the 2 ranks are oversubscribed, and the
    result of the check says so.

    Parameters
    ----------
    ranks : int
        Ranks of the lab's cluster (2 or more).
    cores : int, optional
        Usable cores; :func:`mpilab.runtime.usable_cores` by default.

    Returns
    -------
    int
        ``max(2, min(ranks, cores))``.

    Raises
    ------
    ValueError
        When `ranks` is below 2.
    """
    if ranks < 2:
        raise ValueError(f"a measured case needs a cluster of 2 ranks or more, got {ranks}")
    cores = runtime.usable_cores() if cores is None else cores
    return max(2, min(int(ranks), int(cores)))


# ---------------------------------------------------------------------------------------
# measurements the labs' predictions are graded against: the course's code, on the ranks


def ring_times(comm, nbytes: int, iters: int = 10, reps: int = 7) -> dict:
    """On every rank of `comm`: the one-way hop (ping-pong of ranks 0 and 1, half a round
    trip), a lap of `nbytes` round the ring (each rank sends its own array once its left
    neighbour's has arrived) and a shift (every rank ``Sendrecv``s to the right at once),
    in µs.

    A lap does not pass on the array it received, which would cost more than the hop: a
    large message is copied once, by the receiving process straight out of the sender's
    array, and an array just received sits, just written, in the sender's core's cache,
    where the copy must fetch every line; the hop's ping-pong sends one array again and
    again, already in the other core's cache. On the course's 2-core virtual machine
    forwarding 1 MiB took 1.4 to 2 times the hop, and 4 to 11 times while the machine's two
    cores sat far apart (``python -m mpilab.bench forwarding`` measures both).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The measuring ranks' communicator (two or more ranks).
    nbytes : int
        Bytes of each rank's array (a multiple of 8: doubles).
    iters, reps : int, optional
        Operations timed back to back per repetition, and repetitions; the best
        repetition counts (defaults 10 and 7).

    Returns
    -------
    dict
        ``hop_us``, ``lap_us`` and ``shift_us``: µs per operation, the fastest repetition
        (each timed to the slowest rank's end), the same on every rank.
    """

    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    out, into = doubles(nbytes // 8), doubles(nbytes // 8, 0.0)

    def lap():  # each rank sends its own array once the left neighbour's has arrived
        if rank == 0:
            comm.Send(out, dest=right)
            comm.Recv(into, source=left)
        else:
            comm.Recv(into, source=left)
            comm.Send(out, dest=right)

    def shift():
        comm.Sendrecv(out, dest=right, recvbuf=into, source=left)

    return {"hop_us": best_us(comm, round_trip(comm, out, into), iters, reps) / 2,
            "lap_us": best_us(comm, lap, iters, reps),
            "shift_us": best_us(comm, shift, iters, reps)}


def _library() -> str:
    return runtime.selected_library()


#: the key under which :func:`waited` adds its share to a round's result
WAITED = "_cpu_wait"


def _run_delay_ns() -> int | None:
    """How long this thread has waited, runnable, for a CPU so far (ns), or None where the
    kernel does not say (``/proc/thread-self/schedstat``'s second field)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def waited(comm, func: Callable, *args: Any) -> dict:
    """``func(comm, *args)`` on every rank, with the share of its time that the rank which
    waited most spent waiting for a CPU (runnable, not running) added under
    :data:`WAITED`.

    A measurement made beside other work is slowed because its ranks wait for the cores
    that work holds; the kernel counts that wait per thread (``schedstat``), so the rounds
    themselves say how busy the machine was, where a load average or the machine's
    pressure (the measuring ranks keep both cores busy themselves) cannot.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The measuring ranks' communicator.
    func : callable
        The course's timed function, returning a dict of plain data.
    *args
        Passed to `func` after ``comm``.

    Returns
    -------
    dict
        `func`'s dict, plus :data:`WAITED`: the largest share over the ranks (0 to 1), or
        -1 where no rank could tell.
    """
    from mpi4py import MPI

    w0, t0 = _run_delay_ns(), time.perf_counter_ns()
    out = func(comm, *args)
    w1, t1 = _run_delay_ns(), time.perf_counter_ns()
    share = (w1 - w0) / max(t1 - t0, 1) if w0 is not None and w1 is not None else -1.0
    return {**out, WAITED: comm.allreduce(share, op=MPI.MAX)}


def measure(name: str, func: Callable, *args: Any, ranks: int,
            timeout: float = 60) -> dict:
    """``func(comm, *args)`` on :func:`measuring_ranks` ranks, once per grading session:
    rank 0's result, with ``ranks``, ``cores`` and ``oversubscribed`` added.

    Made in rounds that must agree (:func:`mpilab.grading.steady.steady`): each number is
    the least loaded of :data:`~mpilab.grading.steady.ROUNDS` runs of `func` (the lowest
    time, the highest rate), confirmed by a second run; measured again while one is not,
    and :class:`~mpilab.autograder.failures.Ungradable` when it never is (the part is
    then not graded, rather than graded against load).

    Parameters
    ----------
    name : str
        What is measured; with the MPI library, the ranks and `args` it keys the
        :func:`cached` value.
    func : callable
        The course's timed function, called as ``func(comm, *args)`` on every rank; it
        returns a dict of plain data.
    *args
        Passed to `func` after ``comm``.
    ranks : int
        Ranks of the lab's cluster; the measurement uses at most these.
    timeout : float, optional
        Seconds before the measurement counts as stuck (default 60).

    Returns
    -------
    dict
        Rank 0's dict (each number its least loaded round's), plus ``ranks`` (ranks used),
        ``cores`` (usable cores), ``oversubscribed`` (more ranks than cores) and
        ``cpu_wait`` (the median over the agreeing rounds of :func:`waited`'s share: how
        much of a round the ranks waited for a CPU; None where the kernel does not say).

    Raises
    ------
    Ungradable
        When the rounds did not agree in any attempt: the reason names the quantity and
        its spread.
    """
    from . import run_on_ranks

    cores = runtime.usable_cores()
    p = measuring_ranks(ranks, cores)

    def make() -> dict:
        waits: list[float] = []

        def one_round() -> dict:
            got = dict(run_on_ranks(waited, func, *args, ranks=p, timeout=timeout,
                                    blame=func)[0])
            waits.append(got.pop(WAITED, -1.0))
            return got

        got = steady.steady(f"{name} on {p} ranks", one_round)
        kept = [w for w in waits[-steady.ROUNDS:] if w >= 0]  # the attempt that agreed
        return {**got, "ranks": p, "cores": cores, "oversubscribed": p > cores,
                "cpu_wait": sorted(kept)[len(kept) // 2] if kept else None}

    key = re.sub(r"[^\w.-]+", "_", f"{name}-{_library()}-{p}-" + "-".join(map(str, args)))
    return cached(key, make, measures=True)


def with_alpha_beta(name: str, func: Callable, *args: Any, ranks: int,
                    nbytes: int = 1 << 20) -> dict:
    """:func:`measure` ``func(comm, *args)``, with a ping-pong's α and β
    (:func:`mpilab.pingpong.alpha_beta` of `nbytes`, measured first) added, for the labs'
    predictions from α and β.

    Parameters
    ----------
    name : str
        What is measured (see :func:`measure`).
    func : callable
        The course's timed function, called as ``func(comm, *args)`` on every rank.
    *args
        Passed to `func` after ``comm``.
    ranks : int
        Ranks of the lab's cluster; the measurements use at most these.
    nbytes : int, optional
        Bytes of the large ping-pong message β is measured with (default 1 MiB).

    Returns
    -------
    dict
        :func:`measure`'s dict, plus ``alpha_us`` (µs) and ``beta_MBps`` (MB/s); its
        ``cpu_wait`` the larger of the two measurements'.
    """
    ab = measure("alpha-beta", alpha_beta, nbytes, ranks=ranks)
    m = measure(name, func, *args, ranks=ranks)
    waits = [w for w in (ab.get("cpu_wait"), m.get("cpu_wait")) if w is not None]
    return {**m, "alpha_us": ab["alpha_us"], "beta_MBps": ab["beta_MBps"],
            "cpu_wait": max(waits) if waits else None}  # either can move a prediction


#: Lab 00: a lap and a shift of 1 MiB arrays may take this many times the prediction.
RING_TOLERANCE = (0.5, 2.5)
RING_BYTES = 1 << 20


def ring_now(ranks: int = 4) -> dict:
    """Lab 00: a hop, a lap and a shift of 1 MiB arrays, measured (once per session).

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4); :func:`measuring_ranks` says how many of
        them measure.

    Returns
    -------
    dict
        :func:`ring_times`'s ``hop_us``, ``lap_us`` and ``shift_us`` (µs), with ``ranks``,
        ``cores`` and ``oversubscribed`` (:func:`measure`).
    """
    return measure("ring", ring_times, RING_BYTES, ranks=ranks)


def _lap_hint(got, p, hop) -> str:
    if _is_num(got) and math.isclose(got, (p - 1) * hop):
        return ("That is p - 1 hops: the token also comes back from the last rank to "
                "rank 0.")
    if _is_num(got) and math.isclose(got, hop):
        return "The token waits at each rank for the one before: the hops add up."
    return "A lap is p hops, one after the other."


def _shift_hint(got, p, hop) -> str:
    if _is_num(got) and math.isclose(got, p * hop):
        return ("In a shift every rank sends at the same time: the p messages travel side "
                "by side, not one after the other.")
    return "Every rank sends to its right neighbour at once: the shift takes one hop."


def _expect_ring_cases(ring_times_us: Callable, cases) -> None:
    """Lab 00's model returns two numbers: (lap, shift) = (p·hop, hop) on each case."""
    from .compare import expect, expect_close
    from .running import call_local

    __tracebackhide__ = True
    for p, hop in cases:
        got = call_local(ring_times_us, p, hop, timeout=10)
        expect(isinstance(got, (tuple, list)) and len(got) == 2,
               f"ring_times_us({p}, {hop}) should return two numbers (lap_us, shift_us), "
               f"got {_fmt(got)}")
        expect_close(got[0], p * hop, what=f"the lap of ring_times_us({p}, {hop})",
                     rtol=1e-9, hint=_lap_hint(got[0], p, hop))
        expect_close(got[1], hop, what=f"the shift of ring_times_us({p}, {hop})", rtol=1e-9,
                     hint=_shift_hint(got[1], p, hop))


def _ring_parts(m: dict) -> list[Part]:
    def lap(got):
        lap, _shift = got
        return lap

    def shift(got):
        _lap, shift = got
        return shift

    p, hop = m["ranks"], m["hop_us"]
    return [Part(f"a lap of 1 MiB arrays round {p} ranks", (p, hop), m["lap_us"],
                 "predicted_lap_us", "lap_ratio", pick=lap),
            Part(f"a shift of 1 MiB arrays round {p} ranks", (p, hop), m["shift_us"],
                 "predicted_shift_us", "shift_ratio", pick=shift)]


def _ring_lines(ring_times_us: Callable, m: dict, _ranks: int) -> None:
    print(f"measured on {where(m)}: a hop of 1 MiB {m['hop_us']:.1f} µs")
    print(f"measured: a lap {m['lap_us']:8.1f} µs, a shift {m['shift_us']:8.1f} µs")
    print(f"predicted (lap, shift): {shown(ring_times_us, m['ranks'], m['hop_us'])}")


#: Lab 00: ``ring_times_us(p, hop_us)`` predicts a lap and a shift of the ring from a hop.
RING = Prediction(
    name="ring_times_us", now=ring_now, parts=_ring_parts, tolerance=RING_TOLERANCE,
    model=lambda m: f"a hop of {m['hop_us']:.4g} µs, measured just now on {where(m)}",
    expect_cases=_expect_ring_cases, shows=_ring_lines)


#: Lab 00's test cell and try-it cell.
check_ring_times, show_ring_times = RING.cells(
    __name__, "check_ring_times", "show_ring_times", "ring_times_us(p, hop_us) -> (lap, shift)",
    against="a lap and a shift of 1 MiB arrays", shows="the hop, lap and shift",
    cases=((2, 10.0), (3, 2.5), (5, 1.0), (8, 40.0)),
    keys="``predicted_lap_us``, ``lap_ratio``, ``predicted_shift_us`` and ``shift_ratio``")
