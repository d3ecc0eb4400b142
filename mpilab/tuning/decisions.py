"""The library's decisions: forcing one of its algorithms, Open MPI 4.1's documented
default, the decision table from measurements, and the rules file that applies it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import runtime
from ..collectives import ALGORITHMS, algorithm

# Open MPI's enum COLLTYPE_T (coll_base_functions.h): the collective ids of a rules file.
_OMPI_COLL_ID = {"allgather": 0, "allreduce": 2, "barrier": 6, "bcast": 7, "gather": 9,
                 "reduce": 11, "scatter": 15}


def library_env(op: str, alg: str | None, lib: str | None = None) -> dict:
    """Environment that makes the library run `alg` for `op` (None: its default choice).

    Open MPI: ``coll_tuned`` dynamic rules with the algorithm forced
    (``OMPI_MCA_coll_tuned_use_dynamic_rules=1``, ``OMPI_MCA_coll_tuned_<op>_algorithm``);
    it is read once at ``MPI_Init``, so each forced algorithm needs its own MPI job.
    MPICH: the ``MPIR_CVAR_<OP>_INTRA_ALGORITHM`` control variables (not tested here:
    only Open MPI is installed on the course machine).

    Parameters
    ----------
    op : str
        One of :data:`mpilab.collectives.OPS`.
    alg : str or None
        An algorithm of ``ALGORITHMS[op]``; None or ``"default"``: the library's own
        choice.
    lib : {"openmpi", "mpich"}, optional
        The MPI library; None: the one this course selected
        (:func:`mpilab.runtime.selected_library`).

    Returns
    -------
    dict of str to str
        Environment variables to set for the MPI job (empty for the default).

    Raises
    ------
    ValueError
        When the library has no such algorithm (e.g. MPICH has no linear allgather, Open
        MPI no ring reduce_scatter_block).
    """
    lib = lib or runtime.selected_library()
    if alg is None or alg == "default":
        return {}
    spec = algorithm(op, alg)
    if lib == "openmpi":
        if spec.ompi is None:
            raise ValueError(f"Open MPI has no {alg} {op} to select")
        return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                f"OMPI_MCA_coll_tuned_{op}_algorithm": str(spec.ompi)}
    if lib == "mpich":
        if not spec.mpich:
            raise ValueError(f"MPICH has no {alg} {op} to select")
        return dict(spec.mpich)
    raise ValueError(f"unknown MPI library {lib!r}")


def library_has(op: str, alg: str, lib: str | None = None) -> bool:
    """Whether the library can be made to run `alg` (see :func:`library_env`).

    Parameters
    ----------
    op : str
        One of :data:`mpilab.collectives.OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``.
    lib : {"openmpi", "mpich"}, optional
        The MPI library; None: the one this course selected
        (:func:`mpilab.runtime.selected_library`).

    Returns
    -------
    bool
        False where :func:`library_env` raises ValueError (an algorithm the library has
        not, an unknown op, algorithm or library).
    """
    try:
        library_env(op, alg, lib)
    except ValueError:
        return False
    return True


# Open MPI 4.1's fixed rule for a reduce with a commutative operation (MPI_SUM), from
# coll_tuned_decision_fixed.c (ompi_coll_tuned_reduce_intra_dec_fixed): (communicator
# size bound, [(message size bound, algorithm), ...]); None closes a list.
_REDUCE_NAMES = {1: "linear", 2: "chain", 3: "pipeline", 4: "binary", 5: "binomial",
                 6: "in-order_binary", 7: "rabenseifner"}
_REDUCE_RULE = [
    (4, [(8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2), (None, 3)]),
    (8, [(4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5), (None, 1)]),
    (16, [(8192, 4), (None, 5)]),
    (32, [(4096, 4), (None, 5)]),
    (256, [(None, 5)]),
    (512, [(8192, 5), (16384, 6), (None, 5)]),
    (2048, [(None, 5)]),
    (4096, [(512, 5), (1024, 6), (8192, 5), (16384, 6), (None, 5)]),
    (None, [(16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6), (None, 5)]),
]


# Open MPI 4.1's fixed rules for MPI_Alltoall and, with a commutative operation,
# MPI_Reduce_scatter_block (coll_tuned_decision_fixed.c, the same from 4.1.0 to 4.1.8:
# ompi_coll_tuned_alltoall_intra_dec_fixed, ..._reduce_scatter_block_intra_dec_fixed);
# the message size is the block (dsize * scount, dsize * rcount). As _REDUCE_RULE;
# the alltoall's p == 2 list comes first in the source and is kept apart.
_ALLTOALL_NAMES = {1: "linear", 2: "pairwise", 3: "modified_bruck", 4: "linear_sync",
                   5: "two_proc"}
_ALLTOALL_TWO = [(2, 2), (4, 5), (16, 2), (64, 5), (256, 2), (4096, 5), (32768, 2),
                 (262144, 4), (1048576, 5), (None, 2)]
_ALLTOALL_RULE = [
    (8, [(8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2), (None, 1)]),
    (16, [(262144, 4), (None, 1)]),
    (32, [(4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1), (None, 4)]),
    (64, [(512, 3), (524288, 1), (None, 4)]),
    (128, [(1024, 3), (2048, 1), (4096, 4), (262144, 1), (None, 2)]),
    (256, [(1024, 3), (2048, 4), (262144, 1), (None, 2)]),
    (512, [(1024, 3), (8192, 4), (32768, 1), (None, 2)]),
    (1024, [(512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1), (None, 2)]),
    (2048, [(512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1), (None, 4)]),
    (4096, [(1024, 3), (4096, 4), (8192, 1), (131072, 4), (None, 1)]),
    (None, [(2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1), (None, 4)]),
]
_RSB_NAMES = {1: "basic_linear", 2: "recursive_doubling", 3: "recursive_halving",
              4: "butterfly"}
_RSB_RULE = [
    (4, [(4, 2), (8, 4), (16, 3), (128, 4), (256, 3), (4096, 4), (8192, 3), (131072, 4),
         (None, 1)]),
    (8, [(8, 3), (32, 2), (256, 4), (8192, 3), (16384, 4), (1048576, 3), (None, 1)]),
    (16, [(4, 1), (32, 3), (128, 4), (524288, 3), (4194304, 1), (None, 4)]),
    (32, [(32, 1), (524288, 3), (2097152, 1), (4194304, 3), (None, 4)]),
    (None, [(4, 3), (16, 1), (65536, 4), (262144, 1), (None, 4)]),
]
_RULES = {"reduce": (_REDUCE_RULE, _REDUCE_NAMES), "alltoall": (_ALLTOALL_RULE, _ALLTOALL_NAMES),
          "reduce_scatter_block": (_RSB_RULE, _RSB_NAMES)}


def _by_rule(op: str, p: int, n: int) -> str:
    rule, names = _RULES[op]
    if op == "alltoall" and p == 2:
        return names[next(a for lim, a in _ALLTOALL_TWO if lim is None or n < lim)]
    for bound, rules in rule:
        if bound is None or p < bound:
            return names[next(a for lim, a in rules if lim is None or n < lim)]
    raise AssertionError("unreachable: the last rule has no bound")


def _reduce_default(p: int, n: int) -> str:
    return _by_rule("reduce", p, n)


def library_default(op: str, ranks: int, nbytes: int) -> dict:
    """The algorithm Open MPI 4.1 picks by default for `op`: its documented rule.

    Derived by reading Open MPI 4.1's ``coll_tuned_decision_fixed.c``
    (``ompi_coll_tuned_allgather_intra_dec_fixed``, ``..._alltoall_intra_dec_fixed``,
    and for a commutative operation such as a sum ``..._reduce_intra_dec_fixed`` and
    ``..._reduce_scatter_block_intra_dec_fixed``), not asked from the library: a label
    for comparison with measurements, which is where to check it. ``nbytes`` is the
    per-rank block for an allgather, the block for one destination for an alltoall and
    the block each rank gets for a reduce-scatter (the rules' ``dsize * scount`` or
    ``dsize * rcount``), the whole message for a reduce (``dsize * count``). The names
    are Open MPI's (:data:`mpilab.collectives.OMPI_NAMES`).

    Parameters
    ----------
    op : {"allgather", "reduce", "alltoall", "reduce_scatter_block"}
        The collective; the other rules are not encoded (ValueError).
    ranks : int
        Number of processes (ranks).
    nbytes : int
        Per-rank block (allgather, alltoall, reduce_scatter_block) or whole message
        (reduce), in bytes.

    Returns
    -------
    dict
        ``{"decision": alg, "runs": alg, "source": ...}``: ``runs`` differs from
        ``decision`` where the library falls back (recursive doubling on a
        non-power-of-two count runs Bruck, neighbor exchange on an odd count runs ring).
    """
    if op not in ("allgather", *_RULES):
        raise ValueError("only the allgather, reduce, alltoall and reduce_scatter_block "
                         f"rules are encoded, not {op!r}")
    n = int(nbytes)
    if op in _RULES:
        alg = _by_rule(op, int(ranks), n)
        return {"decision": alg, "runs": alg,
                "source": "library's documented default for a commutative operation: "
                          "derived from Open MPI 4.1 coll_tuned_decision_fixed.c, not "
                          "queried from the library"}
    if ranks == 2:
        alg = "two_proc"
    elif ranks < 32:
        alg = "recursive_doubling"
    else:
        # (communicator-size bound, [(size bound, alg), ...]) for p < 1024
        table = [
            (64, [(1024, 3), (65536, 5), (None, 4)]),
            (128, [(512, 3), (65536, 5), (None, 4)]),
            (256, [(512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4)]),
            (512, [(32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5),
                   (None, 4)]),
            (1024, [(64, 3), (256, 2), (2048, 3), (None, 5)]),
        ]
        names = {2: "bruck", 3: "recursive_doubling", 4: "ring", 5: "neighbor_exchange"}
        alg = "neighbor_exchange"  # p >= 1024 and large blocks; small blocks not encoded
        for bound, rules in table:
            if ranks < bound:
                alg = next(names[a] for lim, a in rules if lim is None or n < lim)
                break
    runs = alg
    if alg == "recursive_doubling" and ranks & (ranks - 1):
        runs = "bruck"
    if alg == "neighbor_exchange" and ranks % 2:
        runs = "ring"
    return {"decision": alg, "runs": runs,
            "source": "library's documented default: derived from Open MPI 4.1 "
                      "coll_tuned_decision_fixed.c, not queried from the library"}


# --------------------------------------------------------------------------- tuning


def beyond_noise(fast: dict, slow: dict) -> bool:
    """Is `fast` faster than `slow` by more than their measured noise?

    Both are timing records (:func:`mpilab.timing.record`): yes when `fast`'s upper
    quartile lies below `slow`'s lower quartile, so that at least three quarters of the
    repetitions of each agree on the order (their middle halves do not overlap). The
    rule :func:`decision_table` falls back on for records without their repetitions.

    Parameters
    ----------
    fast, slow : dict
        Timing records with ``t_us_q1`` and ``t_us_q3`` (µs).

    Returns
    -------
    bool
        True when ``fast["t_us_q3"] < slow["t_us_q1"]``.
    """
    return fast["t_us_q3"] < slow["t_us_q1"]


#: the tuner's significance level, for the whole family of its comparisons (Holm)
ALPHA = 0.05
#: the test, in words (stored in every decision table)
TEST = ("Mann-Whitney U, one-sided (an algorithm's repetitions faster than the library "
        "default's), every forced algorithm faster by its median against the default at "
        "each (ranks, size); Holm's step-down correction over all those comparisons, "
        "family-wise error rate {alpha}")


def faster_p(fast_us: Sequence[float], slow_us: Sequence[float]) -> float:
    """One-sided Mann-Whitney U test that `fast_us` tend to be smaller than `slow_us`.

    Nonparametric: it compares ranks, so one outlier (a repetition that waited for a
    core) cannot decide it. Exact (the null distribution of U counted) when no two times
    are equal and the samples are at most 100 each; otherwise the normal approximation
    with a correction for ties.

    Parameters
    ----------
    fast_us, slow_us : sequence of float
        The two samples: each repetition's time (any one unit).

    Returns
    -------
    float
        The p-value of the null hypothesis "`fast_us` is not stochastically smaller".

    Raises
    ------
    ValueError
        Either sample is empty.
    """
    from scipy.stats import mannwhitneyu

    if len(fast_us) == 0 or len(slow_us) == 0:
        raise ValueError("both samples need at least one repetition")
    both = list(fast_us) + list(slow_us)
    exact = len(set(both)) == len(both) and max(len(fast_us), len(slow_us)) <= 100
    return float(mannwhitneyu(fast_us, slow_us, alternative="less",
                              method="exact" if exact else "asymptotic").pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    Sorted ascending, the i-th smallest (from 0) is multiplied by m - i, made
    non-decreasing along the order and capped at 1; a hypothesis is rejected at
    family-wise level alpha when its adjusted p-value is below alpha (Holm 1979). Never
    less strict than no correction, never stricter than Bonferroni.

    Parameters
    ----------
    pvalues : sequence of float
        The m comparisons' p-values.

    Returns
    -------
    list of float
        The adjusted p-values, one per comparison, in the same order.
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def decision_table(records: Sequence[dict], *, op: str = "allgather",
                   prefix: str = "library:", alpha: float = ALPHA) -> dict:
    """Best algorithm per (ranks, size) from measured records; with the library's choice.

    Only records whose impl starts with `prefix` and names an algorithm take part
    (``library:<alg>``: what a rules file can apply); ``library:default`` is the
    library's own choice, compared against the best. Each entry's ``choice`` is what a
    rules file applies: the best algorithm only where a stated test says it beats the
    library's default, else the library's own (documented) choice: a tuner that switched
    on every difference would follow noise.

    The test: at every (ranks, size), each forced algorithm whose median is below the
    default's is compared with the default by a one-sided Mann-Whitney U test on their
    repetitions (:func:`faster_p`); the p-values of all these comparisons in the table
    are adjusted together by Holm's method (:func:`holm`), so that the chance of any
    switch on noise alone stays below `alpha` however many sizes and algorithms were
    compared. The best algorithm is chosen where its adjusted p-value is below `alpha`
    (``switch`` true). Records without their repetitions (``times_us``) fall back on the
    quartile rule (:func:`beyond_noise`). With few repetitions no test can pass: the
    smallest one-sided p-value of n against n repetitions is 1 / C(2n, n) (0.05 at 3
    against 3).

    Parameters
    ----------
    records : sequence of dict
        Timing records (:func:`mpilab.tuning.measure`, :func:`mpilab.collectives.time_alg`)
        with ``impl``, ``ranks``, ``size_bytes``, the quartiles and ``times_us``; a later
        record of the same impl, ranks and size replaces an earlier one.
    op : str, optional
        The collective measured (default ``"allgather"``); the documented default is
        encoded for the allgather only.
    prefix : str, optional
        The ``impl`` prefix of the library's forced algorithms (default ``"library:"``).
    alpha : float, optional
        The family-wise significance level (default :data:`ALPHA`, 0.05).

    Returns
    -------
    dict
        ``op``, ``library``, ``note``, ``test`` (in words), ``alpha``, ``comparisons``
        (how many tests the correction covers) and ``rules``: per (ranks, size), sorted,
        a dict with ``best`` and ``t_us_best``, ``t_us`` (each algorithm's median, µs),
        the library's documented choice and measured default where known, ``switch``,
        ``choice``, ``why`` (the reason, in words) and, where the test was made,
        ``p_value`` and ``p_holm`` (the best's, raw and adjusted).
    """
    by: dict[tuple[int, int], dict[str, dict]] = {}
    for r in records:
        by.setdefault((int(r["ranks"]), int(r["size_bytes"])), {})[r["impl"]] = r
    cells, family = [], []  # family: (cell index, algorithm, p-value)
    for (p, n), row in sorted(by.items()):
        cands = {k.removeprefix(prefix): v for k, v in row.items()
                 if k.startswith(prefix) and k.removeprefix(prefix) in ALGORITHMS[op]}
        if not cands:
            continue
        best = min(cands, key=lambda a: cands[a]["t_us_median"])
        documented = library_default(op, p, n)["runs"] if op == "allgather" else None
        default = row.get("library:default")
        tested = (default is not None and documented is not None and best != documented
                  and default.get("times_us") and all(c.get("times_us") for c in cands.values()))
        if tested:
            for a, c in cands.items():
                if a != documented and c["t_us_median"] < default["t_us_median"]:
                    family.append((len(cells), a, faster_p(c["times_us"], default["times_us"])))
        cells.append((p, n, cands, best, documented, default, tested))
    adjusted = holm([f[2] for f in family])
    p_of = {(i, a): (pv, adj) for (i, a, pv), adj in zip(family, adjusted, strict=True)}
    m = len(family)
    rules = []
    for i, (p, n, cands, best, documented, default, tested) in enumerate(cells):
        t_best = cands[best]["t_us_median"]
        entry = {"ranks": p, "size_bytes": n, "best": best, "t_us_best": t_best,
                 "t_us": {a: r["t_us_median"] for a, r in cands.items()}}
        if documented is not None:
            entry["library_documented_choice"] = documented
        if default is not None:
            d = default["t_us_median"]
            entry["t_us_library_default"] = d
            entry["library_default_vs_best"] = d / t_best if t_best > 0 else None
        if default is None or documented is None:
            entry["switch"], entry["choice"] = True, best
            entry["why"] = "no library default measured or documented to compare with"
        elif best == documented:
            entry["switch"], entry["choice"] = False, best
            entry["why"] = "the library's own choice is the fastest"
        elif tested and (i, best) not in p_of:
            entry["switch"], entry["choice"] = False, documented
            entry["why"] = ("the library's default was at least as fast as every forced "
                            "algorithm by its median: keep the library's choice")
        elif tested:
            pv, adj = p_of[(i, best)]
            entry["p_value"], entry["p_holm"] = pv, adj
            said = (f"one-sided Mann-Whitney U p = {pv:.2g} on {len(cands[best]['times_us'])} "
                    f"and {len(default['times_us'])} repetitions, Holm-adjusted over {m} "
                    f"comparisons {adj:.2g}")
            if adj < alpha:
                entry["switch"], entry["choice"] = True, best
                entry["why"] = f"{best} beats the library's default beyond the noise ({said} < {alpha})"
            else:
                entry["switch"], entry["choice"] = False, documented
                entry["why"] = (f"{best} was faster by its median, but within the noise ({said}"
                                f" >= {alpha}): keep the library's choice")
        elif beyond_noise(cands[best], default):
            entry["switch"], entry["choice"] = True, best
            entry["why"] = (f"{best} beats the library's default beyond the noise (upper "
                            f"quartile {cands[best]['t_us_q3']:.1f} < lower quartile "
                            f"{default['t_us_q1']:.1f} us; no repetitions to test)")
        else:
            entry["switch"], entry["choice"] = False, documented
            entry["why"] = (f"{best} was faster by its median, but within the noise "
                            f"(upper quartile {cands[best]['t_us_q3']:.1f} >= the "
                            f"default's lower quartile {default['t_us_q1']:.1f} us; no "
                            "repetitions to test): keep the library's choice")
        rules.append(entry)
    return {"op": op, "library": runtime.selected_library(), "rules": rules,
            "test": TEST.format(alpha=alpha), "alpha": alpha, "comparisons": m,
            "note": "best = lowest median time among the library's forced algorithms; "
                    "choice = best where it beats the library's default by the test "
                    "(Mann-Whitney U, Holm-corrected), else the library's own choice"}


def write_ompi_rules(table: dict, path: str | os.PathLike) -> Path:
    """Write a decision table as an Open MPI ``coll_tuned`` dynamic rules file.

    Open MPI matches the largest listed communicator size not above the job's, then
    the largest message size not above the call's; for allgather that size is the
    whole result (block x ranks), so block sizes are scaled here. Use it with
    :func:`rules_env`.

    Parameters
    ----------
    table : dict
        A decision table (:func:`decision_table`); each rule's ``choice`` (else its
        ``best``) is written.
    path : str or os.PathLike
        The file to write (its folder is made if missing; the file replaced).

    Returns
    -------
    pathlib.Path
        `path`.

    Raises
    ------
    ValueError
        An operation Open MPI's rules files have no id for here.
    """
    op = table["op"]
    if op not in _OMPI_COLL_ID:
        raise ValueError(f"no Open MPI collective id for {op!r}")
    by_p: dict[int, list[tuple[int, int]]] = {}
    for r in table["rules"]:
        p = int(r["ranks"])
        msg = int(r["size_bytes"]) * (p if op in ("allgather", "gather", "scatter") else 1)
        by_p.setdefault(p, []).append((msg, ALGORITHMS[op][r.get("choice", r["best"])].ompi))
    lines = ["1  # collectives in this file", f"{_OMPI_COLL_ID[op]}  # {op}",
             f"{len(by_p)}  # communicator sizes"]
    for p, rules in sorted(by_p.items()):
        rules.sort()
        rules[0] = (0, rules[0][1])  # the smallest size rule covers everything below it
        lines += [f"{p}  # communicator size", f"{len(rules)}  # message sizes"]
        lines += [f"{m} {a} 0 0  # bytes, algorithm, fan-in/out, segment size"
                  for m, a in rules]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Open MPI's reader skips text after the numbers it needs on a line.
    path.write_text("\n".join(lines) + "\n")
    return path


def rules_env(path: str | os.PathLike) -> dict:
    """Environment that makes Open MPI use a rules file written by :func:`write_ompi_rules`.

    Parameters
    ----------
    path : str or os.PathLike
        The rules file.

    Returns
    -------
    dict of str to str
        ``OMPI_MCA_coll_tuned_use_dynamic_rules`` and
        ``OMPI_MCA_coll_tuned_dynamic_rules_filename`` (the absolute path), for the MPI
        job's environment.
    """
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(Path(path).resolve())}
