"""The collective algorithms the course implements: what each one is, and its cost.

:data:`ALGORITHMS` is the registry, ``ALGORITHMS[op][name]`` an :class:`Algorithm`: its
summary, the process counts it admits, its number of steps, its Hockney cost, and the
numbers Open MPI and MPICH give it (:data:`OMPI_NAMES`). :func:`predict` and
:func:`predict_table` turn a cost into a prediction labelled as one
(:class:`mpilab.models.Prediction`). Nothing here runs MPI: running, tracing and timing an
algorithm is :mod:`mpilab.collectives.running`'s.

Examples
--------
>>> ALGORITHMS["allgather"]["bruck"].steps(8)
3
>>> print(predict("allgather", "ring", 4, 1024, alpha_us=1.0, beta_MBps=1000.0))
prediction: 6.07 µs for 1,024 B (ring allgather on 4 ranks, Hockney α = 1 µs, β = 1 GB/s)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..models import Prediction, params_label

__all__ = ["ALGORITHMS", "LIBRARY", "OMPI_NAMES", "OPS", "Algorithm", "admissible",
           "algorithm", "predict", "predict_table"]

OPS = ("bcast", "reduce", "allreduce", "barrier", "scatter", "gather", "allgather",
       "alltoall", "reduce_scatter_block")
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


def _bruck_blocks(p: int) -> int:
    """Blocks Bruck's alltoall sends in all: over rounds k, the slots i < p with bit k set."""
    return sum(bin(i).count("1") for i in range(p))


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


def _pow2_halving(p: int) -> str | None:
    if p & (p - 1):
        return ("recursive halving reduce-scatter needs a power-of-two process count, "
                f"got {p}")
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
        Open MPI 4.1 ``coll_tuned_<op>_algorithm`` number of the same algorithm (None:
        Open MPI has none; its recursive halving reduce-scatter also folds ranks when p
        is not a power of two, which ours refuses).
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

    def admissible(self, ranks: int) -> str | None:
        """Why this algorithm cannot run on `ranks` processes, or None when it can.

        Parameters
        ----------
        ranks : int
            Number of processes (ranks).

        Returns
        -------
        str or None
            The reason, in a sentence (``"... needs a power-of-two process count, got
            6"``); None when `ranks` is admitted.
        """
        return self._check(ranks)

    def steps(self, ranks: int) -> int:
        """Communication steps on `ranks` processes: the Lamport depth of its schedule.

        The length of the longest chain of messages each waiting for the one before
        (:func:`mpilab.tracing.steps`), not the number of sequential sends at one rank:
        the model times (:meth:`time_us`) count those.

        Parameters
        ----------
        ranks : int
            Number of processes (ranks) the schedule runs on.

        Returns
        -------
        int
            The number of steps; 0 on one process.
        """
        return self._steps(ranks)

    def time_us(self, ranks: int, n: float, alpha_us: float, beta_MBps: float) -> float:
        """Model time in µs (a bare number: use :func:`predict` for a labelled one).

        Parameters
        ----------
        ranks : int
            Number of processes (ranks); not checked here (see :meth:`admissible`).
        n : float
            Message size, or per-rank block (scatter, gather, allgather, alltoall,
            reduce_scatter_block), in bytes.
        alpha_us : float
            Latency of one point-to-point message, µs.
        beta_MBps : float
            Bandwidth of one point-to-point message, MB/s.

        Returns
        -------
        float
            The Hockney cost of :attr:`cost`, in µs.
        """
        return self._time(ranks, n, alpha_us, beta_MBps)


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
    # alltoall (n: the block for one destination)
    _alg("alltoall", "pairwise",
         "step k: send the block for me + k to it, get mine from me - k", "any p",
         "(p-1)(α + n/β)", 2, {}, _any, lambda p: p - 1,
         lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("alltoall", "bruck",
         "round k: send the slots whose index has bit k set to me + 2^k; rotate before, after",
         "any p", "⌈log2 p⌉α + B(p) n/β, B(p) = Σ_k blocks with bit k set (p/2 log2 p if "
         "p = 2^m)", 3, {}, _any, _log2c,
         lambda p, n, a, b: _log2c(p) * a + _bruck_blocks(p) * n / b),
    # reduce-scatter with equal blocks (n: the block each rank gets)
    _alg("reduce_scatter_block", "ring",
         "step k: add the own block to the partial result from the left, pass it right",
         "any p", "(p-1)(α + n/β) (+ p-1 local reductions of n bytes)", None, {}, _any,
         lambda p: p - 1, lambda p, n, a, b: (p - 1) * _m(p, n, a, b)),
    _alg("reduce_scatter_block", "recursive_halving",
         "round k: swap half the blocks still held with me ^ p/2^(k+1), add the half kept",
         "p a power of two", "log2 p α + (p-1)n/β (+ the same bytes reduced locally)", 3, {},
         _pow2_halving, _log2c, lambda p, n, a, b: _log2c(p) * a + (p - 1) * n / b),
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
    "alltoall": {1: "linear", 2: "pairwise", 3: "modified_bruck", 4: "linear_sync",
                 5: "two_proc"},
    "reduce_scatter_block": {1: "basic_linear", 2: "recursive_doubling",
                             3: "recursive_halving", 4: "butterfly"},
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


def admissible(op: str, ranks: int) -> list[str]:
    """The algorithms of `op` that can run on `ranks` processes, in registry order.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    ranks : int
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
    return [a for a, spec in ALGORITHMS[op].items() if spec.admissible(ranks) is None]


# --------------------------------------------------------------------------- models


def predict(op: str, alg: str, ranks: int, nbytes: int, alpha_us: float | None = None,
            beta_MBps: float | None = None, *, fit=None) -> Prediction:
    """Hockney-model time of one call, labelled as a prediction.

    Parameters
    ----------
    op, alg : str
        Operation and algorithm (see :data:`ALGORITHMS`; ``ALGORITHMS[op][alg].cost``
        gives the formula).
    ranks : int
        Processes.
    nbytes : int
        Message size (bcast, reduce, allreduce) or per-rank block (scatter, gather,
        allgather; alltoall: the block for one destination; reduce_scatter_block: the
        block each rank gets), in bytes.
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
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    why = spec.admissible(ranks)
    if why:
        raise ValueError(why)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    t = spec.time_us(ranks, float(nbytes), float(alpha_us), float(beta_MBps))
    label = f"{alg.replace('_', ' ')} {op} on {ranks} ranks, Hockney {params_label(alpha_us, beta_MBps)}"
    return Prediction(float(t), int(nbytes), label)


def predict_table(op: str, ranks: int, sizes: Iterable[int], alpha_us: float | None = None,
                  beta_MBps: float | None = None, *, fit=None, algs: Sequence[str] | None = None):
    """Predictions for every admissible algorithm and size: a DataFrame, kind="prediction".

    Parameters
    ----------
    op, ranks
        As for :func:`admissible`.
    sizes : iterable of int
        Message sizes, or per-rank blocks (scatter, gather, allgather, alltoall,
        reduce_scatter_block), in bytes.
    alpha_us, beta_MBps : float, optional
        Latency (µs) and bandwidth (MB/s) of one point-to-point message.
    fit : mpilab.models.HockneyFit, optional
        Take α and β from a fit instead.
    algs : sequence of str, optional
        The algorithms to predict; None: every one :func:`admissible` on `ranks`.

    Returns
    -------
    pandas.DataFrame
        One row per algorithm and size: ``impl`` (``model:<alg>``), ``op``, ``alg``,
        ``ranks``, ``size_bytes``, ``t_us`` (µs), ``kind`` and ``model`` (the label).

    Raises
    ------
    ValueError
        As :func:`predict`: no α and β, an unknown op or algorithm, or one that cannot
        run on `ranks` processes.
    """
    import pandas as pd

    rows = []
    for alg in algs or admissible(op, ranks):
        for n in sizes:
            pr = predict(op, alg, ranks, int(n), alpha_us, beta_MBps, fit=fit)
            rows.append({"impl": f"model:{alg}", "op": op, "alg": alg, "ranks": ranks,
                         "size_bytes": int(n), "t_us": pr.t_us, "kind": "prediction",
                         "model": pr.model})
    return pd.DataFrame(rows)
