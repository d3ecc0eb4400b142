"""Lab 07's graded checks (a link, a prediction across it, a placement), on mpilab.grading.

The lab's test cells call these functions::

    from mpilab.grading import network as N
    N.check_fit_link(fit_link)                  # α from the smallest, β from the large
    N.check_link_loads(link_loads, cases)       # busiest link direction per step
    N.check_predict(predict_ms, cases)          # Σ over steps of α + load / β
    N.check_predict_measured(predict_ms)        # against the ring, measured just now
    N.check_best_placement(best_placement, cases)

The student's functions are plain Python on plain data (lists of numbers, traced
schedules); they run through :func:`mpilab.grading.call_local`, which at autograde time
runs them in the sandbox. The references below and the measurements run where the check
runs, which at autograde time is the grader's kernel: the schedules are traced by the
course's own allgathers (:func:`mpilab.network.schedules`), and the link is measured on
freshly made emulated nodes (:func:`mpilab.network.measure`, as root) or, where nodes
cannot be made, read from the reference machine's measurement, and the check says which.

The model the lab teaches (a model, not a measurement): a message between two nodes
crosses the sending node's link outwards and the receiving node's link inwards; in one
step of a collective, each direction of each link carries the bytes of every message
that uses it, one after the other; the step lasts as long as its busiest direction,
``α + load / β``; steps follow one another; messages inside a node cost nothing next to
the link.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from mpilab import grading, network
from mpilab.grading.measured import cached

__all__ = [
    "PREDICTION_TOLERANCE",
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
]

#: The measured ring (fastest repetition) may take this many times the prediction: the
#: model is a lower bound (the link idles while ranks match messages and start the next
#: step), so below 1 only noise, above it the handshakes a step waits for.
PREDICTION_TOLERANCE = (0.8, 1.6)
BIG_BYTES = 131072  # "large": ten times the Fast Ethernet bucket, past the eager limit


# ---------------------------------------------------------------------------------------
# the references


def reference_fit(n_bytes: Sequence[float], t_us: Sequence[float],
                  big_bytes: float) -> tuple[float, float]:
    """(α µs, β MB/s): α the time of the smallest message, β from a straight line
    through the messages of at least `big_bytes` (ordinary least squares).

    Parameters
    ----------
    n_bytes : sequence of float
        Message sizes of a ping-pong, in bytes.
    t_us : sequence of float
        Their one-way times, in µs.
    big_bytes : float
        The least size, in bytes, of the messages β is fitted on.

    Returns
    -------
    alpha_us : float
        The time of the smallest message, in µs.
    beta_MBps : float
        1 / slope of the line through the large messages, in MB/s.

    Raises
    ------
    ValueError
        When fewer than two messages are of `big_bytes` or more.
    """
    n = np.asarray(n_bytes, dtype=float)
    t = np.asarray(t_us, dtype=float)
    big = n >= big_bytes
    if big.sum() < 2:
        raise ValueError(f"need at least two messages of {big_bytes:g} B or more")
    slope, _ = np.polyfit(n[big], t[big], 1)
    return float(t[np.argmin(n)]), float(1 / slope)


def reference_loads(schedule: Sequence[dict], hosts: Sequence) -> list[int]:
    """Bytes on the busiest direction of any node's link, per step (steps 1 .. last).

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule: one ``{"step", "src", "dst", "bytes"}`` per message, steps
        from 1.
    hosts : sequence
        The node of each rank, rank ``r`` at index ``r``.

    Returns
    -------
    list of int
        Per step, the most bytes any link direction carries (a node's "out" adds the
        messages it sends to other nodes, its "in" those it receives); 0 for a step
        inside nodes only.
    """
    steps = max((m["step"] for m in schedule), default=0)
    out = [dict() for _ in range(steps)]
    for m in schedule:
        a, b = hosts[m["src"]], hosts[m["dst"]]
        if a != b:
            load = out[m["step"] - 1]
            load[(a, "out")] = load.get((a, "out"), 0) + m["bytes"]
            load[(b, "in")] = load.get((b, "in"), 0) + m["bytes"]
    return [max(load.values(), default=0) for load in out]


def reference_predict_ms(schedule: Sequence[dict], hosts: Sequence, alpha_us: float,
                         beta_MBps: float) -> float:
    """Σ over the steps with traffic on a link of α + load / β, in ms.

    Parameters
    ----------
    schedule, hosts : sequence
        As for :func:`reference_loads`: the traced schedule and each rank's node.
    alpha_us : float
        The link's latency α, in µs.
    beta_MBps : float
        The link's bandwidth β, in MB/s.

    Returns
    -------
    float
        The predicted time of the collective, in ms.
    """
    return sum(alpha_us + load / beta_MBps
               for load in reference_loads(schedule, hosts) if load) / 1e3


def _ranks(schedule: Sequence[dict]) -> int:
    return 1 + max(max(m["src"], m["dst"]) for m in schedule)


def _placements(p: int, nodes: int):
    """Every way of putting p ranks on `nodes` nodes, p / nodes each (node 0 holds rank 0)."""
    per = p // nodes

    def fill(left: list[int], node: int, hosts: dict):
        if not left:
            yield [hosts[r] for r in range(p)]
            return
        first, rest = left[0], left[1:]
        for others in itertools.combinations(rest, per - 1):
            chosen = {first, *others}
            yield from fill([r for r in left if r not in chosen], node + 1,
                            {**hosts, **{r: node for r in chosen}})

    yield from fill(list(range(p)), 0, {})


def reference_best(schedule: Sequence[dict], nodes: int) -> tuple[int, list[int]]:
    """(least total bytes on the busiest direction, summed over steps; one placement).

    Tries every placement of the schedule's ranks, an equal number on each node, node 0
    holding rank 0.

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule, as for :func:`reference_loads`.
    nodes : int
        Number of nodes (it must divide the number of ranks).

    Returns
    -------
    cost : int
        The least sum over steps of :func:`reference_loads`, in bytes.
    hosts : list of int
        A placement with that cost: the node of each rank.
    """
    best = None
    for hosts in _placements(_ranks(schedule), nodes):
        cost = sum(reference_loads(schedule, hosts))
        if best is None or cost < best[0]:
            best = (cost, hosts)
    return best


def placement_problem(hosts, ranks: int, nodes: int) -> str | None:
    """What is wrong with `hosts` as a placement of p ranks on `nodes` nodes, or None.

    Parameters
    ----------
    hosts : object
        What the student's function returned: it should be a list of ints, the node of
        each rank.
    ranks : int
        Number of ranks.
    nodes : int
        Number of nodes, each to hold ``p // nodes`` ranks.

    Returns
    -------
    str or None
        What is wrong, in words, or None when it is a valid placement.
    """
    if not isinstance(hosts, (list, tuple)):
        return f"return a list with the node of each rank, not {type(hosts).__name__}"
    if len(hosts) != ranks:
        return f"the placement has {len(hosts)} entries for {ranks} ranks"
    if any(type(h) is not int or not 0 <= h < nodes for h in hosts):
        return f"nodes are numbered 0 .. {nodes - 1}; got {list(hosts)}"
    counts = [list(hosts).count(k) for k in range(nodes)]
    if len(set(counts)) != 1:
        return (f"every node holds {ranks // nodes} ranks; the placement {list(hosts)} puts "
                f"{counts} on nodes 0 .. {nodes - 1}")
    return None


# ---------------------------------------------------------------------------------------
# data: traced schedules and the link, computed where the check runs


def traced(alg: str, ranks: int, block: int) -> list[dict]:
    """The course's allgather `alg` traced on `ranks` ranks (once per session).

    Parameters
    ----------
    alg : str
        An allgather of :mod:`mpilab.collectives` admissible on `ranks` ranks, e.g.
        "ring".
    ranks : int
        Number of ranks.
    block : int
        Bytes per rank's block.

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message
        (:func:`mpilab.network.schedules`).
    """
    from mpilab import runtime

    name = f"schedules-{runtime.selected_library()}-{ranks}-{block}"
    return cached(name, lambda: network.schedules(ranks, block))[alg]


def link_now(link: str = "fast-ethernet") -> dict:
    """The link measured on fresh emulated nodes (once per session), else the reference.

    Parameters
    ----------
    link : str, optional
        The emulated link to measure (default "fast-ethernet"). Where emulated nodes
        cannot be made the reference machine's Fast Ethernet measurement is returned,
        whatever `link` says.

    Returns
    -------
    dict
        :func:`mpilab.network.measure`'s record (``pingpong``, ``ring``, ``block_bytes``,
        ``link`` ...), or :func:`mpilab.network.reference`'s; ``source`` says which, in
        words.
    """
    from mpilab import netlab

    if netlab.available() is not None:
        return network.reference()
    doc = cached(f"link-{link}", lambda: network.measure(
        link, sizes=(8, 64, 1024, 65536, 131072, 262144, 524288, 1 << 20), reps=5),
        measures=True)
    return {**doc, "source": f"measured on this machine at {doc['started'][11:16]}"}


def _series(link: dict) -> tuple[list[int], list[float]]:
    recs = link["pingpong"]
    return [r["size_bytes"] for r in recs], [r["t_us_min"] for r in recs]


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
        want = reference_loads(sched, hosts)
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
        want = reference_predict_ms(sched, hosts, a, b)
        got = grading.call_local(predict_ms, sched, hosts, a, b, timeout=10)
        grading.expect(_number(got), f"predict_ms should return a number (ms), got {got!r:.60}")
        grading.expect_close(got, want, what=f"predict_ms for {_where(alg, p, block, hosts)}, "
                             f"α = {a:g} µs, β = {b:g} MB/s", rtol=1e-6,
                             hint=_predict_hint(got, sched, hosts, a, b, want))


def _predict_hint(got, sched, hosts, a, b, want) -> str:
    loads = reference_loads(sched, hosts)
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


def check_predict_measured(predict_ms: Callable,
                           tolerance: tuple[float, float] = PREDICTION_TOLERANCE) -> dict:
    """The prediction for the course's ring on block and cyclic placements, from the
    link's α and β (the reference fit of the same measurement), against the ring
    measured on it.

    Parameters
    ----------
    predict_ms : callable
        The student's ``predict_ms(schedule, hosts, alpha_us, beta_MBps) -> float`` (ms).
    tolerance : (float, float), optional
        The lowest and highest accepted ratio measured / predicted (default
        :data:`PREDICTION_TOLERANCE`).

    Returns
    -------
    dict
        ``{placement: (predicted ms, measured ms)}``, placement "slot" (block) or "node"
        (cyclic).

    Raises
    ------
    mpilab.grading.CheckFailed
        When it returns no positive number, ignores α and β, or a ratio is off.
    """
    __tracebackhide__ = True
    link = link_now()
    n, t = _series(link)
    a, b = reference_fit(n, t, BIG_BYTES)
    out = {}
    lo, hi = tolerance
    for map_by, rec in link["ring"].items():
        hosts = list(rec["node_of_rank"])
        sched = traced("ring", len(hosts), link["block_bytes"])
        got = grading.call_local(predict_ms, sched, hosts, a, b, timeout=10)
        grading.expect(_number(got) and got > 0,
                       f"predict_ms should return a positive number of ms, got {got!r:.60}")
        again = grading.call_local(predict_ms, sched, hosts, 2 * a, b / 2, timeout=10)
        grading.expect_close(again, 2 * got, rtol=1e-6,
                             what=f"predict_ms with twice α ({2 * a:.1f} µs) and half β "
                             f"({b / 2:.3g} MB/s)",
                             hint="twice α and half β must double a time made of α and "
                             "load / β: the prediction must come from the α and β it is "
                             "given, not from numbers of the reference link or a "
                             "measurement")
        measured = rec["t_us_min"] / 1e3
        ratio = measured / got
        what = (f"the ring allgather, {network.PLACEMENTS[map_by]}, "
                f"{link['block_bytes']:,} B per rank across {link['link']} "
                f"({link['source']})")
        grading.expect(lo <= ratio <= hi,
                       f"{what}: measured {measured:.1f} ms, you predicted {got:.1f} ms "
                       f"(α = {a:.1f} µs, β = {b:.2f} MB/s); the measurement should be "
                       f"{lo:g} to {hi:g} times the prediction, it is {ratio:.2f} times.")
        out[map_by] = (got, measured)
    return out


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
        best, example = reference_best(sched, nodes)
        got = grading.call_local(best_placement, sched, nodes, timeout=20)
        problem = placement_problem(got, p, nodes)
        grading.expect(problem is None, f"best_placement for {alg} on {p} ranks, {nodes} "
                       f"nodes: {problem}")
        cost = sum(reference_loads(sched, list(got)))
        grading.expect(cost == best,
                       f"best_placement for {alg} on {p} ranks and {nodes} nodes: {list(got)} "
                       f"puts {cost:,} B on the busiest link directions (summed over steps); "
                       f"{example} puts {best:,} B. Try every placement: with node 0 "
                       "holding rank 0, there are only a few dozen.")
        chosen.append(list(got))
    return chosen
