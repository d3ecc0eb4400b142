"""Lab 07's graded checks (a link, a prediction across it, a placement, a bcast's
crossings): the lab's one checks module, on mpilab.grading.

The lab's test cells call these functions::

    from mpilab.grading import network as N
    N.check_fit_link(fit_link)                  # α from the smallest, β from the large
    N.check_link_loads(link_loads, cases)       # busiest link direction per step
    N.check_predict(predict_ms, cases)          # Σ over steps of α + load / β
    N.check_predict_measured(predict_ms)        # against the ring, measured just now
    N.check_best_placement(best_placement, cases)
    N.check_bcast_crossings(bcast_crossings, cases)   # flat binomial vs two-level

The student's functions are plain Python on plain data (lists of numbers, traced
schedules); they run through :func:`mpilab.grading.call_local`, which at autograde time
runs them in the sandbox. What they are compared with is
:mod:`mpilab.grading.network_model`'s (the model, the references, the traced schedules
and the link) and :mod:`mpilab.grading.hierarchy`'s (the bcast's crossings); the
measurements run where the check runs, which at autograde time is the grader's kernel:
the link is measured on freshly made emulated nodes (:func:`mpilab.network.measure`, as
root) or, where nodes cannot be made, read from the reference machine's measurement, and
the check says which.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from mpilab import grading
from mpilab.grading import keys
from mpilab.grading.hierarchy import check_bcast_crossings
from mpilab.grading.network_model import (
    BIG_BYTES,
    LAB,
    PREDICT,
    PREDICTION_TOLERANCE,
    _series,
    link_now,
    placement_problem,
    reference_best,
    reference_fit,
    reference_loads,
    reference_predict_ms,
    traced,
)

__all__ = [
    "PREDICTION_TOLERANCE",
    "BIG_BYTES",
    "PREDICT",
    "reference_fit",
    "reference_loads",
    "reference_predict_ms",
    "reference_best",
    "placement_problem",
    "link_now",
    "traced",
    "check_fit_link",
    "check_link_loads",
    "check_predict",
    "check_predict_measured",
    "check_best_placement",
    "check_bcast_crossings",
    "canonical",
]


# ---------------------------------------------------------------------------------------
# checks


def _number(x) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def check_fit_link(fit_link: Callable, *, hidden: bool = False) -> tuple[float, float]:
    """`fit_link(n_bytes, t_us, big_bytes)` on the measured link (and, hidden, on data
    in another order, with another threshold, and too few large messages).

    Parameters
    ----------
    fit_link : callable
        The student's ``fit_link(n_bytes, t_us, big_bytes) -> (alpha_us, beta_MBps)``.
    hidden : bool, optional
        Also the hidden cases (default False): the data shuffled, another threshold,
        made-up data, and too few large messages (it must raise ValueError).

    Returns
    -------
    (float, float)
        The (α µs, β MB/s) it gave for the measured link.

    Raises
    ------
    mpilab.grading.CheckFailed
        When it returns something other than two numbers, differs from
        :func:`reference_fit` by more than 1e-6 (relative), or does not refuse too few
        large messages.
    """
    __tracebackhide__ = True
    link = link_now()
    n, t = _series(link)
    cases = [(n, t, BIG_BYTES, "the link's ping-pong")]
    if hidden:
        order = np.random.default_rng(7).permutation(len(n))
        cases += [([n[i] for i in order], [t[i] for i in order], BIG_BYTES,
                   "the same data in another order"),
                  (n, t, 262144, "only messages of 256 KiB and more as large"),
                  ([16, 4096, 8192, 1 << 16, 1 << 20], [30.0, 31.5, 60.0, 5800.0, 91000.0],
                   8192, "made-up data")]
    got = None
    for n_, t_, big, what in cases:
        want = reference_fit(n_, t_, big)
        out = grading.call_local(fit_link, list(n_), list(t_), big, timeout=10)
        grading.expect(type(out) in (tuple, list) and len(out) == 2 and all(map(_number, out)),
                       f"fit_link should return two numbers (alpha_us, beta_MBps), got "
                       f"{out!r:.80}")
        a, b = out
        hint = _fit_hint(a, b, want, n_, t_)
        grading.expect_close(a, want[0], what=f"α on {what} (µs)", rtol=1e-6, hint=hint)
        grading.expect_close(b, want[1], what=f"β on {what} (MB/s)", rtol=1e-6, hint=hint)
        got = got or (a, b)
    if hidden:
        try:
            out = grading.call_local(fit_link, [8, 1024, 1 << 20], [20.0, 40.0, 9e4],
                                     BIG_BYTES, timeout=10)
        except grading.RaisedError as e:
            grading.expect("ValueError" in str(e), f"with one large message fit_link should "
                           f"raise ValueError; {e}")
        else:
            grading.expect(False, "with a single message of at least big_bytes there is no "
                           f"line to fit: raise ValueError (it returned {out!r:.60})")
    return got


def _fit_hint(a, b, want, n, t) -> str:
    n, t = np.asarray(n, dtype=float), np.asarray(t, dtype=float)
    slope, icpt = np.polyfit(n, t, 1)
    if math.isclose(b, 1 / slope, rel_tol=1e-6):
        return ("That β comes from a line through every message: the small ones, which "
                "the bucket lets through at once, bend it. Fit only the large ones.")
    if math.isclose(a, icpt, rel_tol=1e-6) or a < 0:
        return ("α is the line's intercept: a line through large messages crosses zero "
                "below the smallest message's time (the bucket's burst is free). Take the "
                "smallest message's time.")
    if math.isclose(b, slope, rel_tol=1e-6) or (b and math.isclose(1 / b, want[1], rel_tol=1e-6)):
        return "β is 1 / slope (bytes per µs = MB/s), not the slope."
    if math.isclose(b, want[1] * 1e6, rel_tol=1e-6):
        return "β in bytes per second; the lab wants MB/s (bytes per µs)."
    return ("α: the time of the smallest message; β: 1 / slope of np.polyfit(n, t, 1) over "
            "the messages of at least big_bytes.")


def _cases(cases: Iterable) -> list[tuple[str, int, int, list]]:
    """(alg, ranks, block, hosts) from ``(alg, ranks, block, hosts)`` or named placements."""
    out = []
    for alg, p, block, hosts in cases:
        if isinstance(hosts, str):  # "slot" / "node" on 2 nodes, as Fabric.launch places
            hosts = [r // (p // 2) for r in range(p)] if hosts == "slot" else [r % 2 for r in
                                                                               range(p)]
        out.append((alg, p, block, list(hosts)))
    return out


def _where(alg, p, block, hosts) -> str:
    return f"{alg} on {p} ranks, {block:,} B blocks, placement {hosts}"


def _loads(alg: str, p: int, block: int, hosts: list, sched: list, name: str) -> list:
    """The course's loads of the case (the answer key's: :mod:`mpilab.grading.keys`)."""
    __tracebackhide__ = True
    return keys.answer(LAB, "loads", (alg, p, block, hosts),
                       lambda key: key.reference_loads(sched, hosts),
                       what=f"{name} for {_where(alg, p, block, hosts)}")


def canonical(hosts: Sequence) -> list[int]:
    """A placement with its nodes numbered in order of first appearance (rank 0's node is
    0): every renaming of the nodes of one placement gives the same list.

    Parameters
    ----------
    hosts : sequence
        The node of each rank, any labels.

    Returns
    -------
    list of int
        The same placement, nodes 0, 1, ... in the order ranks 0, 1, ... first use them.
    """
    seen: dict = {}
    return [seen.setdefault(h, len(seen)) for h in hosts]


def check_link_loads(link_loads: Callable, cases: Iterable, *, shuffle: bool = False) -> None:
    """`link_loads(schedule, hosts)` equals the reference on each traced case.

    Parameters
    ----------
    link_loads : callable
        The student's ``link_loads(schedule, hosts) -> list`` (bytes per step).
    cases : iterable of tuple
        ``(alg, ranks, block, hosts)``: the course's allgather, ranks, bytes per block,
        and the node of each rank, or "slot" (block) / "node" (cyclic) on 2 nodes.
    shuffle : bool, optional
        Hand it the messages in reverse order (default False): the step of a message is
        its ``step``, not its place in the list.

    Raises
    ------
    mpilab.grading.CheckFailed
        When it returns no list, the wrong number of steps, or a wrong load (with a hint
        naming the likely slip).
    """
    __tracebackhide__ = True
    for alg, p, block, hosts in _cases(cases):
        sched = traced(alg, p, block)
        if shuffle:  # the messages in another order: steps say which step, not the order
            sched = sched[::-1]
        want = _loads(alg, p, block, hosts, sched, "link_loads")
        got = grading.call_local(link_loads, sched, hosts, timeout=10)
        grading.expect(isinstance(got, (list, tuple)),
                       f"link_loads should return a list (one number per step), got "
                       f"{got!r:.60}")
        hint = _loads_hint(list(got), sched, hosts, want)
        grading.expect(len(got) == len(want),
                       f"{_where(alg, p, block, hosts)}: {len(got)} numbers for "
                       f"{len(want)} steps. {hint}")
        grading.expect_equal([float(x) for x in got], [float(x) for x in want],
                             what=f"link_loads for {_where(alg, p, block, hosts)}", hint=hint)


def _loads_hint(got: list, sched, hosts, want) -> str:
    steps = len(want)
    total = [0] * steps
    each = [0] * steps
    for m in sched:
        if hosts[m["src"]] != hosts[m["dst"]]:
            total[m["step"] - 1] += m["bytes"]
            each[m["step"] - 1] = max(each[m["step"] - 1], m["bytes"])
    if got == total and total != want:
        return ("That is every crossing byte of the step added up; the two directions of "
                "a link (and different nodes' links) carry their bytes at the same time.")
    if got == each and each != want:
        return ("That is the largest single message; messages that use the same direction "
                "of a link in one step share it, so add them up.")
    if len(got) == steps + 1:
        return "Steps start at 1: one entry per step, the first for step 1."
    return ("Per step: add each crossing message's bytes to its sender's node 'out' and its "
            "receiver's node 'in'; the step's load is the largest of those sums.")


def check_predict(predict_ms: Callable, cases: Iterable) -> None:
    """`predict_ms(schedule, hosts, alpha_us, beta_MBps)` equals the model on each case;
    a case is ``(alg, ranks, block, hosts, alpha_us, beta_MBps)``.

    Parameters
    ----------
    predict_ms : callable
        The student's ``predict_ms(schedule, hosts, alpha_us, beta_MBps) -> float`` (ms).
    cases : iterable of tuple
        ``(alg, ranks, block, hosts, alpha_us, beta_MBps)``; `hosts` as for
        :func:`check_link_loads`.

    Raises
    ------
    mpilab.grading.CheckFailed
        When it returns no number, or differs from :func:`reference_predict_ms` by more
        than 1e-6 (relative).
    """
    __tracebackhide__ = True
    for alg, p, block, hosts, a, b in cases:
        (alg, p, block, hosts), = _cases([(alg, p, block, hosts)])
        sched = traced(alg, p, block)
        loads = _loads(alg, p, block, hosts, sched, "predict_ms")
        want = sum(a + load / b for load in loads if load) / 1e3  # the model, as the lab says
        got = grading.call_local(predict_ms, sched, hosts, a, b, timeout=10)
        grading.expect(_number(got), f"predict_ms should return a number (ms), got {got!r:.60}")
        grading.expect_close(got, want, what=f"predict_ms for {_where(alg, p, block, hosts)}, "
                             f"α = {a:g} µs, β = {b:g} MB/s", rtol=1e-6,
                             hint=_predict_hint(got, loads, a, b, want))


def _predict_hint(got, loads, a, b, want) -> str:
    busy = [x for x in loads if x]
    us = sum(a + x / b for x in busy)
    if math.isclose(got, us, rel_tol=1e-6):
        return "That is µs; the function returns ms."
    if math.isclose(got, sum(x / b for x in busy) / 1e3, rel_tol=1e-6):
        return "The latency α is missing: every step that crosses a link pays it."
    if math.isclose(got, sum(a + x / b for x in loads) / 1e3, rel_tol=1e-6) and got != want:
        return "A step that sends nothing across a link costs nothing here: no α for it."
    if math.isclose(got, (a + sum(busy) / b) / 1e3, rel_tol=1e-6):
        return "Each step waits for the one before: α once per step, not once in all."
    return "Σ over the steps with a load of (α + load / β), from your link_loads, in ms."


#: ``check_predict_measured(predict_ms, *, ranks=4)``: :data:`PREDICT`'s check.
check_predict_measured, _ = PREDICT.cells(
    __name__, "check_predict_measured", None,
    "predict_ms(schedule, hosts, alpha_us, beta_MBps)",
    against="the course's ring allgather on block and cyclic placements across the link",
    cases=None, keys="``slot_predicted_ms``, ``node_predicted_ms`` and ``*_ratio``")


def check_best_placement(best_placement: Callable, cases: Iterable) -> list[list[int]]:
    """`best_placement(schedule, nodes)` puts p / nodes ranks on each node and no
    placement sends fewer bytes over the busiest link directions (summed over steps);
    a case is ``(alg, ranks, block, nodes)``.

    Parameters
    ----------
    best_placement : callable
        The student's ``best_placement(schedule, nodes) -> list`` (the node of each
        rank), called under a 20 s timer.
    cases : iterable of tuple
        ``(alg, ranks, block, nodes)``: the course's allgather, ranks, bytes per block,
        nodes.

    Returns
    -------
    list of list of int
        The placement it chose on each case.

    Raises
    ------
    mpilab.grading.CheckFailed
        When a placement is not valid (:func:`placement_problem`) or costs more than
        :func:`reference_best`'s.
    """
    __tracebackhide__ = True
    chosen = []
    for alg, p, block, nodes in cases:
        sched = traced(alg, p, block)
        ans = keys.answer(LAB, "placements", (alg, p, block, nodes),
                          lambda key, s=sched, k=nodes: key.placement_costs(s, k),
                          what=f"best_placement for {alg} on {p} ranks and {nodes} nodes")
        best, example = ans["best"], ans["example"]
        got = grading.call_local(best_placement, sched, nodes, timeout=20)
        problem = placement_problem(got, p, nodes)
        grading.expect(problem is None, f"best_placement for {alg} on {p} ranks, {nodes} "
                       f"nodes: {problem}")
        cost = ans["costs"][json.dumps(canonical(got))]
        grading.expect(cost == best,
                       f"best_placement for {alg} on {p} ranks and {nodes} nodes: {list(got)} "
                       f"puts {cost:,} B on the busiest link directions (summed over steps); "
                       f"{example} puts {best:,} B. Try every placement: with node 0 "
                       "holding rank 0, there are only a few dozen.")
        chosen.append(list(got))
    return chosen
