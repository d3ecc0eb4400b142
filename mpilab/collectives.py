"""Collective algorithms: run, trace, time and predict them.

The algorithms themselves are C on point-to-point messages (``kernels/collectives``):
broadcast (linear, DECK's binary tree, MPI's binomial tree), reduce (gather then reduce
once as DECK, binomial, butterfly by recursive halving), allreduce (recursive doubling,
ring), barrier (linear, tree, dissemination), scatter and gather (linear, binomial) and
the allgather family of the Open MPI paper (linear, Bruck, recursive doubling, ring,
neighbor exchange, two-proc). ``"library"`` as the algorithm means MPI's own collective.

Functions taking ``comm`` are collective: every rank calls them (under ``mpiexec`` or
on the engines, ``cluster.run(collectives.trace, None, "allgather", "bruck", 1024)``;
``comm=None`` means ``MPI.COMM_WORLD``) and every rank gets the same answer.

:func:`predict` gives Hockney-model costs (α + n/β per message), always labelled as
predictions (:class:`mpilab.models.Prediction`). Measuring the library's own algorithms
against each other and against its choice, and tuning it, is :mod:`mpilab.tuning`.

Examples
--------
>>> ALGORITHMS["allgather"]["bruck"].steps(8)
3
>>> print(predict("allgather", "ring", 4, 1024, alpha_us=1.0, beta_MBps=1000.0))
prediction: 6.07 µs for 1,024 B (ring allgather on 4 ranks, Hockney α = 1 µs, β = 1 GB/s)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from . import runtime
from .models import Prediction, params_label

__all__ = [
    "ALGORITHMS",
    "OPS",
    "Algorithm",
    "admissible",
    "calibrate",
    "events",
    "predict",
    "predict_table",
    "run",
    "time_alg",
    "trace",
]

OPS = ("bcast", "reduce", "allreduce", "barrier", "scatter", "gather", "allgather")
LIBRARY = "library"


def _log2c(p: int) -> int:
    """ceil(log2 p), 0 for p = 1."""
    return (p - 1).bit_length()


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _tree_depth(p: int, sends: int = 2) -> int:
    """Sequential sends on the critical path of DECK's binary tree (children sent in turn)."""
    t = [0] * p
    for v in range(1, p):
        parent, k = (v - 1) // 2, (v - 1) % 2 + 1
        t[v] = t[parent] + k
    return max(t) if p > 1 else 0


def _log2f(p: int) -> int:
    """floor(log2 p)."""
    return p.bit_length() - 1


def _barrier_tree_steps(p: int) -> int:
    """Lamport depth of DECK's tree barrier: up the binary tree, then back down it."""
    kids = [[c for c in (2 * v + 1, 2 * v + 2) if c < p] for v in range(p)]
    clock = [0] * p
    for v in reversed(range(p)):  # leaves first: the signal up
        clock[v] = max((clock[c] for c in kids[v]), default=0) + (v > 0)
    for v in range(p):  # parents first: the release down, children in turn
        for c in kids[v]:
            clock[v] += 1
            clock[c] = max(clock[c], clock[v])
    return max(clock) if p > 1 else 0


def _any(p: int) -> str | None:
    return None


def _pow2(p: int) -> str | None:
    if p & (p - 1):
        return f"recursive doubling allgather needs a power-of-two process count, got {p}"
    return None


def _even(p: int) -> str | None:
    if p % 2:
        return f"neighbor exchange allgather needs an even process count, got {p}"
    return None


def _two(p: int) -> str | None:
    if p != 2:
        return f"two-proc allgather needs exactly 2 processes, got {p}"
    return None


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of one collective operation.

    Attributes
    ----------
    op, name : str
        Operation (``"allgather"``) and algorithm (``"bruck"``).
    summary : str
        The idea in one line.
    rule : str
        Which process counts it admits, in words.
    cost : str
        Its Hockney cost formula as text (n: bytes per message or block, p: processes).
    ompi : int or None
        Open MPI 4.1 ``coll_tuned_<op>_algorithm`` number of the same algorithm.
    mpich : dict
        MPICH control variables that select the same algorithm (empty: none does).
    """

    op: str
    name: str
    summary: str
    rule: str
    cost: str
    ompi: int | None
    mpich: dict = field(default_factory=dict)
    _check: Callable[[int], str | None] = field(default=_any, repr=False)
    _steps: Callable[[int], int] = field(default=_log2c, repr=False)
    _time: Callable[[int, float, float, float], float] | None = field(default=None, repr=False)

    def admissible(self, p: int) -> str | None:
        """Why this algorithm cannot run on `p` processes, or None when it can.

        Parameters
        ----------
        p : int
            Number of processes (ranks).

        Returns
        -------
        str or None
            The reason, in a sentence (``"... needs a power-of-two process count, got
            6"``); None when `p` is admitted.
        """
        return self._check(p)

    def steps(self, p: int) -> int:
        """Communication steps on `p` processes: the Lamport depth of its schedule.

        The length of the longest chain of messages each waiting for the one before
        (:func:`mpilab.tracing.steps`), not the number of sequential sends at one rank:
        the model times (:meth:`time_us`) count those.

        Parameters
        ----------
        p : int
            Number of processes (ranks).

        Returns
        -------
        int
            The number of steps; 0 on one process.
        """
        return self._steps(p)

    def time_us(self, p: int, n: float, alpha_us: float, beta_MBps: float) -> float:
        """Model time in µs (a bare number: use :func:`predict` for a labelled one).

        Parameters
        ----------
        p : int
            Number of processes (ranks); not checked here (see :meth:`admissible`).
        n : float
            Message size, or per-rank block (scatter, gather, allgather), in bytes.
        alpha_us : float
            Latency of one point-to-point message, µs.
        beta_MBps : float
            Bandwidth of one point-to-point message, MB/s.

        Returns
        -------
        float
            The Hockney cost of :attr:`cost`, in µs.
        """
        return self._time(p, n, alpha_us, beta_MBps)


def _alg(op, name, summary, rule, cost, ompi, mpich, check, steps, time):
    return Algorithm(op, name, summary, rule, cost, ompi, mpich, check, steps, time)


def _m(p, n, a, b):  # one message
    return a + n / b


# MPICH algorithm control variables (MPICH 4.x names; not tested here: the course
# machine has Open MPI only). Device-level collectives are switched off so that the
# MPIR-level choice is the one that runs.
_MPICH_NODEV = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"}


def _mpich(var, value, **extra):
    return {**_MPICH_NODEV, f"MPIR_CVAR_{var}_INTRA_ALGORITHM": value, **extra}


_LIST = [
    # broadcast
    _alg("bcast", "linear", "the root sends the whole message to each rank in turn",
         "any p", "(p-1)(α + n/β)", 1, {}, _any, lambda p: p - 1,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("bcast", "binary_tree",
         "DECK: the root sends to its two children, each forwards to its own two",
         "any p", "d(p)(α + n/β), d(p) ≈ 2⌊log2 p⌋ sequential sends on the deepest path", 5,
         _mpich("BCAST", "tree", MPIR_CVAR_BCAST_TREE_TYPE="kary", MPIR_CVAR_BCAST_TREE_KVAL="2"),
         _any, _tree_depth, lambda p, n, a, b: _tree_depth(p) * _m(p, n, a, b)),
    _alg("bcast", "binomial",
         "MPI: in stage k every rank that has the data sends it 2^k ranks on",
         "any p", "⌈log2 p⌉(α + n/β)", 6, _mpich("BCAST", "binomial"), _any, _log2c,
         lambda p, n, a, b: _log2c(p) * _m(p, n, a, b)),
    # reduce
    _alg("reduce", "gather_reduce", "DECK: everyone sends to the root, which reduces once",
         "any p", "(p-1)(α + n/β) (+ p-1 local reductions)", 1, {}, _any,
         lambda p: 1 if p > 1 else 0, lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("reduce", "binomial", "partial results combined up a binomial tree",
         "any p", "⌈log2 p⌉(α + n/β)", 5, _mpich("REDUCE", "binomial"), _any, _log2f,
         lambda p, n, a, b: _log2c(p) * _m(p, n, a, b)),
    _alg("reduce", "recursive_halving",
         "butterfly: reduce-scatter by recursive halving, then gather the pieces",
         "any p (p not a power of two folds pairs first)",
         "2 log2 q α + 2 (q-1)/q n/β, q = 2^⌊log2 p⌋ (+ α + n/β if p ≠ q)", 7,
         _mpich("REDUCE", "reduce_scatter_gather"), _any,
         lambda p: 2 * _log2c(_pof2(p)) + (p != _pof2(p)),
         lambda p, n, a, b: (2 * math.log2(_pof2(p)) * a
                             + 2 * (_pof2(p) - 1) / _pof2(p) * n / b
                             + (_m(p, n, a, b) if p != _pof2(p) else 0.0))),
    # allreduce
    _alg("allreduce", "recursive_doubling", "butterfly: exchange the whole vector with me ^ 2^k",
         "any p (p not a power of two folds pairs first and last)",
         "log2 q (α + n/β), q = 2^⌊log2 p⌋ (+ 2(α + n/β) if p ≠ q)", 3,
         _mpich("ALLREDUCE", "recursive_doubling"), _any,
         lambda p: _log2c(_pof2(p)) + 2 * (p != _pof2(p)),
         lambda p, n, a, b: ((math.log2(_pof2(p)) + 2 * (p != _pof2(p))) * _m(p, n, a, b))),
    _alg("allreduce", "ring", "reduce-scatter round a ring, then allgather round it",
         "any p", "2(p-1)α + 2(p-1)/p n/β", 4, _mpich("ALLREDUCE", "ring"), _any,
         lambda p: 2 * (p - 1), lambda p, n, a, b: 2 * (p - 1) * (a + n / p / b)),
    # barrier
    _alg("barrier", "linear", "everyone reports to rank 0, which then releases everyone",
         "any p", "2(p-1)α", 1, {}, _any, lambda p: p if p > 1 else 0,
         lambda p, n, a, b: 2 * (p - 1) * a),
    _alg("barrier", "tree", "DECK: empty messages up the binary tree, the release down it",
         "any p", "≈ 2 d(p) α", 6, {}, _any, _barrier_tree_steps,
         lambda p, n, a, b: 2 * _tree_depth(p) * a),
    _alg("barrier", "dissemination", "round k: signal me + 2^k, wait for me - 2^k",
         "any p", "⌈log2 p⌉α", 4, _mpich("BARRIER", "k_dissemination",
                                         MPIR_CVAR_BARRIER_DISSEM_KVAL="2"),
         _any, _log2c, lambda p, n, a, b: _log2c(p) * a),
    # scatter, gather (n: block per rank)
    _alg("scatter", "linear", "the root sends each rank its block in turn", "any p",
         "(p-1)(α + n/β)", 1, {}, _any, lambda p: p - 1,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("scatter", "binomial", "halves of the blocks handed down a binomial tree",
         "any p", "⌈log2 p⌉α + (p-1)n/β", 2, _mpich("SCATTER", "binomial"), _any, _log2c,
         lambda p, n, a, b: _log2c(p) * a + (p - 1) * n / b),
    _alg("gather", "linear", "each rank sends its block to the root", "any p",
         "(p-1)(α + n/β)", 1, {}, _any, lambda p: 1 if p > 1 else 0,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("gather", "binomial", "blocks collected up a binomial tree", "any p",
         "⌈log2 p⌉α + (p-1)n/β", 2, _mpich("GATHER", "binomial"), _any, _log2f,
         lambda p, n, a, b: _log2c(p) * a + (p - 1) * n / b),
    # allgather (n: block per rank)
    _alg("allgather", "linear", "linear gather to rank 0, then linear broadcast of p blocks",
         "any p", "(p-1)(α + n/β) + (p-1)(α + p n/β)", 1, {}, _any,
         lambda p: p if p > 1 else 0,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b) + (p - 1) * _m(p, p * n, a, b)),
    _alg("allgather", "bruck",
         "round k: send the blocks held to me - 2^k, get as many from me + 2^k; rotate",
         "any p", "⌈log2 p⌉α + (p-1)n/β", 2, _mpich("ALLGATHER", "brucks"), _any, _log2c,
         lambda p, n, a, b: _log2c(p) * a + (p - 1) * n / b),
    _alg("allgather", "recursive_doubling", "round k: swap all blocks held with me ^ 2^k",
         "p a power of two", "log2 p α + (p-1)n/β", 3,
         _mpich("ALLGATHER", "recursive_doubling"), _pow2, _log2c,
         lambda p, n, a, b: _log2c(p) * a + (p - 1) * n / b),
    _alg("allgather", "ring", "p-1 steps, each passing the newest block to the right",
         "any p", "(p-1)(α + n/β)", 4, _mpich("ALLGATHER", "ring"), _any, lambda p: p - 1,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("allgather", "neighbor_exchange",
         "Chen et al.: p/2 steps swapping pairs of blocks with alternate neighbours",
         "p even", "(p/2)α + (p-1)n/β", 5, {}, _even, lambda p: p // 2,
         lambda p, n, a, b: p / 2 * a + (p - 1) * n / b),
    _alg("allgather", "two_proc", "one exchange of the own block", "p = 2", "α + n/β", 6, {},
         _two, lambda p: 1, lambda p, n, a, b: _m(p, n, a, b)),
]

ALGORITHMS: dict[str, dict[str, Algorithm]] = {op: {} for op in OPS}
for _a in _LIST:
    ALGORITHMS[_a.op][_a.name] = _a
del _a

# Open MPI 4.1 names of the coll_tuned algorithm numbers (`ompi_info --param coll tuned
# --level 9`); ours differ only in spelling.
OMPI_NAMES = {
    "allgather": {1: "linear", 2: "bruck", 3: "recursive_doubling", 4: "ring", 5: "neighbor",
                  6: "two_proc"},
    "bcast": {1: "basic_linear", 5: "binary_tree", 6: "binomial"},
    "reduce": {1: "linear", 5: "binomial", 7: "rabenseifner"},
    "allreduce": {3: "recursive_doubling", 4: "ring"},
    "barrier": {1: "linear", 4: "bruck", 6: "tree"},
    "scatter": {1: "basic_linear", 2: "binomial"},
    "gather": {1: "basic_linear", 2: "binomial"},
}


def algorithm(op: str, alg: str) -> Algorithm:
    """The :class:`Algorithm` `alg` of `op`; a ValueError naming the choices if unknown.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of `op` (the keys of ``ALGORITHMS[op]``).

    Returns
    -------
    Algorithm
        Its summary, the process counts it admits, its cost formula and Open MPI's
        number for it.

    Raises
    ------
    ValueError
        `op` or `alg` is unknown; the message names the choices.
    """
    if op not in ALGORITHMS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if alg not in ALGORITHMS[op]:
        raise ValueError(f"alg for {op} must be one of {tuple(ALGORITHMS[op])}, got {alg!r}")
    return ALGORITHMS[op][alg]


def admissible(op: str, p: int) -> list[str]:
    """The algorithms of `op` that can run on `p` processes, in registry order.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    p : int
        Number of processes (ranks).

    Returns
    -------
    list of str
        Names of the admitted algorithms of ``ALGORITHMS[op]`` (``"library"`` is not
        one of them).

    Raises
    ------
    ValueError
        An unknown `op`.
    """
    if op not in ALGORITHMS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    return [a for a, spec in ALGORITHMS[op].items() if spec.admissible(p) is None]


# --------------------------------------------------------------------------- running


def _comm(comm):
    if comm is None:
        from mpi4py import MPI

        return MPI.COMM_WORLD
    return comm


def kernel_module():
    """The compiled collectives kernel (``mpilab.kernels.collectives``), imported here.

    Returns
    -------
    module
        ``mpilab.kernels.collectives``.
    """
    from .kernels import collectives

    return collectives


def run(comm, op: str, alg: str, sendbuf=None, recvbuf=None, *, root: int = 0,
        redop: str = "sum"):
    """Run one collective with a chosen algorithm (collective over `comm`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``).
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``, or ``"library"`` for MPI's own collective.
    sendbuf, recvbuf : numpy.ndarray or None
        As MPI's collective of the same name, with the per-rank block size taken from
        the buffers: bcast works in `recvbuf`; scatter sends ``p`` blocks of the root's
        `sendbuf`; gather and allgather fill ``p`` blocks of `recvbuf`. Buffers only the
        root uses may be None on the other ranks.
    root : int
        Root rank of bcast, reduce, scatter and gather.
    redop : {"sum", "max", "min", "prod"}
        Reduction of reduce and allreduce, applied in C on the typed data.

    Returns
    -------
    numpy.ndarray or None
        `recvbuf`, filled (None for barrier).

    Raises
    ------
    ValueError
        On every rank alike: an unknown op or algorithm, an inadmissible process count
        (recursive doubling allgather needs a power of two, ...), a bad root, or a bad
        buffer on any rank.
    """
    kernel_module().run(_comm(comm), op, alg, sendbuf, recvbuf, root=root, redop=redop)
    return recvbuf


def events(comm, op: str, alg: str, nbytes: int, *, root: int = 0) -> list[list[tuple]]:
    """Every rank's messages ``(kind, peer, nbytes)`` for one call on `nbytes` per block.

    Recorded in C from the messages the algorithm really sends and receives, in program
    order (a Sendrecv gives its send, then its receive); collected on every rank.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``); every rank calls this.
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``.
    nbytes : int
        Message size, or per-rank block (scatter, gather, allgather), in bytes.
    root : int, optional
        Root rank of bcast, reduce, scatter and gather (default 0).

    Returns
    -------
    list of list of tuple
        ``events[r]``: rank r's ``(kind, peer, nbytes)``, `kind` ``"send"`` or
        ``"recv"``; the same on every rank.
    """
    comm = _comm(comm)
    mine = kernel_module().trace(comm, op, alg, nbytes, dtype="uint8", root=root)
    return comm.allgather(mine)


def trace(comm, op: str, alg: str, nbytes: int, *, root: int = 0) -> list[dict]:
    """The message schedule of one call: ``{"step", "src", "dst", "bytes"}`` per message.

    Steps come from Lamport clocks over the traced messages
    (:func:`mpilab.tracing.schedule`); ``mpilab.tracing.steps(trace(...))`` is the
    number of communication steps. Collective; every rank gets the same schedule.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``); every rank calls this.
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``.
    nbytes : int
        Message size, or per-rank block (scatter, gather, allgather), in bytes.
    root : int, optional
        Root rank of bcast, reduce, scatter and gather (default 0).

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message, sorted by step (from 1).
    """
    from . import tracing

    return tracing.schedule(events(comm, op, alg, nbytes, root=root))


def _library_label(op: str) -> str:
    """``library:<alg>`` when this process's environment forces one, else library:default."""
    env = os.environ
    if runtime.selected_library() == "mpich":
        var = os.environ.get(f"MPIR_CVAR_{op.upper()}_INTRA_ALGORITHM", "auto")
        for name, spec in ALGORITHMS[op].items():
            if spec.mpich and spec.mpich.get(f"MPIR_CVAR_{op.upper()}_INTRA_ALGORITHM") == var:
                return f"library:{name}"
        return "library:default"
    if env.get("OMPI_MCA_coll_tuned_use_dynamic_rules") == "1":
        forced = env.get(f"OMPI_MCA_coll_tuned_{op}_algorithm", "0")
        for name, spec in ALGORITHMS[op].items():
            if str(spec.ompi) == forced:
                return f"library:{name}"
        if env.get("OMPI_MCA_coll_tuned_dynamic_rules_filename"):
            return "library:tuned"
    return "library:default"


def calibrate(comm, op: str, alg: str, nbytes: int, *, min_time: float = 0.005,
              max_iters: int = 100_000, root: int = 0) -> int:
    """Calls per timed repetition for one repetition to last about `min_time` s (collective).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``); every rank calls this.
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``, or ``"library"``.
    nbytes : int
        Message size, or per-rank block (scatter, gather, allgather), in bytes.
    min_time : float, optional
        Seconds one repetition should last (default 0.005).
    max_iters : int, optional
        The most calls returned (default 100,000).
    root : int, optional
        Root rank of bcast, reduce, scatter and gather (default 0).

    Returns
    -------
    int
        Calls per repetition, between 1 and `max_iters`; the same on every rank (the
        kernel times the slowest rank).
    """
    k = kernel_module()
    iters = 1
    while True:
        t = k.time(_comm(comm), op, alg, nbytes, root=root, warmup=1, iters=iters, reps=3).min()
        per_rep = t * iters
        if per_rep >= min_time / 4 or iters >= max_iters:
            return int(min(max_iters, max(1, round(iters * min_time / max(per_rep, 1e-9)))))
        iters = min(max_iters, iters * 8)


def time_alg(comm, op: str, alg: str, sizes: Iterable[int], *, reps: int = 7,
             iters: int | dict | None = None, warmup: int | None = None,
             min_time: float = 0.005, root: int = 0, impl: str | None = None,
             separated: bool = False) -> list[dict]:
    """Time `op` with `alg` at each block size (bytes), inside C; one record per size.

    Collective. The protocol is the course's (``mpilab_timing.h``): warm-up calls,
    barrier, the timed loop in C, the slowest rank's time, `reps` repetitions. `iters`
    (calls per repetition, per size with a dict) is calibrated to `min_time` when None.
    The calls of the loop run back to back, so those of a rooted collective (bcast,
    reduce, scatter, gather) may overlap and the loop then times a throughput; with
    `separated` an untimed barrier precedes every call and each rank sums the time of
    its calls only (OSU's way), which times one call's latency. Records say which in
    ``timing`` (``back-to-back`` or ``separated``).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``); every rank calls this.
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``, or ``"library"`` for MPI's own.
    sizes : iterable of int
        Message sizes, or per-rank blocks (scatter, gather, allgather), in bytes.
    reps : int, optional
        Timed repetitions per size (default 7).
    iters : int or dict of int to int, optional
        Calls per repetition, or per size; None (or a size missing from the dict):
        calibrated with :func:`calibrate`.
    warmup : int, optional
        Untimed calls first; None: as many as `iters`, 20 at most.
    min_time : float, optional
        Seconds one repetition should last when calibrated (default 0.005).
    root : int, optional
        Root rank of bcast, reduce, scatter and gather (default 0).
    impl : str, optional
        The records' ``impl`` label instead of the one described below.
    separated : bool, optional
        True: an untimed barrier before every call (latency); False: calls back to
        back (throughput for rooted collectives).

    Returns
    -------
    list of dict
        :func:`mpilab.timing.record` records with ``impl`` (``mpilab:<alg>``, or for
        ``alg="library"`` ``library:default`` / ``library:<forced alg>`` as the
        environment says), ``op``, ``alg``, ``ranks``, ``size_bytes`` (per-rank block),
        ``iters``, ``t_us_min``, ``t_us_median``, ...
    """
    from .timing import record

    comm = _comm(comm)
    k = kernel_module()
    label = impl or (_library_label(op) if alg == LIBRARY else f"mpilab:{alg}")
    out = []
    for n in sizes:
        n = int(n)
        it = iters.get(n) if isinstance(iters, dict) else iters
        if it is None:
            it = calibrate(comm, op, alg, n, min_time=min_time, root=root)
        w = warmup if warmup is not None else max(1, min(it, 20))
        t = k.time(comm, op, alg, n, root=root, warmup=w, iters=it, reps=reps,
                   separated=separated)
        out.append(record(list(t), size_bytes=n, impl=label, op=op, alg=alg,
                          ranks=comm.Get_size(), iters=it,
                          timing="separated" if separated else "back-to-back"))
    return out


# --------------------------------------------------------------------------- models


def predict(op: str, alg: str, p: int, nbytes: int, alpha_us: float | None = None,
            beta_MBps: float | None = None, *, fit=None) -> Prediction:
    """Hockney-model time of one call, labelled as a prediction.

    Parameters
    ----------
    op, alg : str
        Operation and algorithm (see :data:`ALGORITHMS`; ``ALGORITHMS[op][alg].cost``
        gives the formula).
    p : int
        Processes.
    nbytes : int
        Message size (bcast, reduce, allreduce) or per-rank block (scatter, gather,
        allgather), in bytes.
    alpha_us, beta_MBps : float
        Latency (µs) and bandwidth (MB/s) of one point-to-point message.
    fit : mpilab.models.HockneyFit, optional
        Take α and β from a fit instead.

    Returns
    -------
    mpilab.models.Prediction
        Printed as ``prediction: ...``; the model ignores contention, the copies and
        reductions in memory, and oversubscription.
    """
    spec = algorithm(op, alg)
    if fit is not None:
        alpha_us, beta_MBps = fit.alpha_us, fit.beta_MBps
    if alpha_us is None or beta_MBps is None:
        raise ValueError("give alpha_us and beta_MBps, or fit=")
    if not (alpha_us >= 0 and beta_MBps > 0):
        raise ValueError(f"need alpha_us >= 0 and beta_MBps > 0, got {alpha_us}, {beta_MBps}")
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"p must be a positive integer, got {p!r}")
    why = spec.admissible(p)
    if why:
        raise ValueError(why)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    t = spec.time_us(p, float(nbytes), float(alpha_us), float(beta_MBps))
    label = f"{alg.replace('_', ' ')} {op} on {p} ranks, Hockney {params_label(alpha_us, beta_MBps)}"
    return Prediction(float(t), int(nbytes), label)


def predict_table(op: str, p: int, sizes: Iterable[int], alpha_us: float | None = None,
                  beta_MBps: float | None = None, *, fit=None, algs: Sequence[str] | None = None):
    """Predictions for every admissible algorithm and size: a DataFrame, kind="prediction".

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    p : int
        Number of processes (ranks).
    sizes : iterable of int
        Message sizes, or per-rank blocks (scatter, gather, allgather), in bytes.
    alpha_us, beta_MBps : float, optional
        Latency (µs) and bandwidth (MB/s) of one point-to-point message.
    fit : mpilab.models.HockneyFit, optional
        Take α and β from a fit instead.
    algs : sequence of str, optional
        The algorithms to predict; None: every one :func:`admissible` on `p`.

    Returns
    -------
    pandas.DataFrame
        One row per algorithm and size: ``impl`` (``model:<alg>``), ``op``, ``alg``,
        ``ranks``, ``size_bytes``, ``t_us`` (µs), ``kind`` and ``model`` (the label).

    Raises
    ------
    ValueError
        As :func:`predict`: no α and β, an unknown op or algorithm, or one that cannot
        run on `p` processes.
    """
    import pandas as pd

    rows = []
    for alg in algs or admissible(op, p):
        for n in sizes:
            pr = predict(op, alg, p, int(n), alpha_us, beta_MBps, fit=fit)
            rows.append({"impl": f"model:{alg}", "op": op, "alg": alg, "ranks": p,
                         "size_bytes": int(n), "t_us": pr.t_us, "kind": "prediction",
                         "model": pr.model})
    return pd.DataFrame(rows)
