"""Lab 06's part at the paper's scale: choosing an allgather for a simulated machine.

The lab's test cell calls::

    from mpilab.grading import simulated as grading_simulated
    grading_simulated.check_choose_allgather(
        choose_allgather, {(64, "cyclic"): (32, 2048, 131072), (64, "block"): (...)})

and its try-it cell ``grading_simulated.show_choices(choose_allgather, 64, sizes)``.

The student's ``choose_allgather(p, block_bytes, placement)`` returns the name of one of
the course's allgather algorithms (:data:`mpilab.collectives.ALGORITHMS`) for `p` ranks of
the allgather paper's two nodes, placed ``"cyclic"`` (rank r on node r % 2, the paper's
placement, ``map_by="node"``) or in ``"block"`` (the first half of the ranks on node 0,
``map_by="slot"``), and blocks of `block_bytes`. It is plain Python on plain data and
runs through :func:`mpilab.grading.call_local` (at autograde time in the sandbox, under a
timeout), so a choice that raises, loops, returns something that is not a name, or names
an algorithm that cannot run on `p` ranks fails this check alone.

The verdict: the course's own C algorithms simulated with SimGrid SMPI
(:func:`mpilab.sim.collective`, platform ``allgather-paper``, at the case's placement).
The choice earns the points when, at every graded case, its simulated time is at most
:data:`TOLERANCE` times the fastest admissible algorithm's. The placement matters: with
cyclic placement every ring neighbour is on the other node and the logarithmic
algorithms win at every size; with block placement only the messages between the two
halves cross the link between the nodes, and which algorithm wins changes with the
block size (how many flows share that link in a step, and how many latencies cross it). Computation is off in these
runs, so they are deterministic: they are made once per grading session (kept in the
grader's private cache folder for :data:`mpilab.grading.measured.CACHE_SECONDS`), and where
SimGrid is missing (or fails) the check reads the same simulation saved with the course,
and says so: the visible cases from ``reference/simulated/lab06-allgather-paper.json``
(what the students' edition holds), the hidden ones from
``autograder/reference/lab06-allgather-hidden.json`` (the instructors' side only:
:data:`HIDDEN_REFERENCE`). The hidden cases themselves are written in one place, the
hidden tests of the lab's source notebook; this module knows only the visible ones
(:func:`write_reference` makes either file, given its cases).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from mpilab import collectives, grading, paths, sim
from mpilab.grading.measured import cached

__all__ = [
    "PLATFORM",
    "PLACEMENTS",
    "TOLERANCE",
    "ALPHA_US",
    "BETA_MBPS",
    "VISIBLE",
    "REFERENCE",
    "HIDDEN_REFERENCE",
    "admissible",
    "simulated",
    "choice_problem",
    "slow_choices",
    "check_choose_allgather",
    "show_choices",
    "reference_records",
    "write_reference",
]

PLATFORM = "allgather-paper"
#: The student's placement names and SMPI's: cyclic, rank r on node r % 2, as the paper
#: placed its processes; block, ranks 0..p/2-1 on node 0 (node 0 filled first).
PLACEMENTS = {"cyclic": "node", "block": "slot"}
#: A choice is right when its simulated time is at most this many times the fastest one's.
TOLERANCE = 1.25
#: One message across the paper's network, from the platform file: two private links of
#: 7.5 µs each way (assumed, typical of MPI over TCP), 40 Gb/s Ethernet (the paper's).
ALPHA_US = 15.0
BETA_MBPS = 5000.0
#: The ((ranks, placement), block sizes) of the lab's visible check and try-it table; the
#: hidden ones (other ranks, other sizes) are only in the source notebook's hidden tests.
#: reference/simulated/ holds these simulations (and the library's choice beside them),
#: job by job as graded. At block placement each set has sizes where different algorithms
#: win by more than the tolerance (a constant answer fails there).
VISIBLE = {(64, "cyclic"): (32, 2048, 131072), (64, "block"): (32, 2048, 131072)}
REFERENCE = "lab06-allgather-paper"
#: The hidden cases' saved simulation, relative to the course root: the instructors' side.
HIDDEN_REFERENCE = "autograder/reference/lab06-allgather-hidden.json"
SIM_TIMEOUT = 240  # seconds per simulated job (a few seconds each on a 2-core machine)
CALL_TIMEOUT = 10  # seconds per call of the student's function


def _fmt_bytes(n: int) -> str:
    from mpilab import plots

    return plots.format_bytes(n)


def admissible(ranks: int) -> list[str]:
    """The course's C allgathers that run on `ranks` ranks, in the registry's order.

    Parameters
    ----------
    ranks : int
        Number of ranks.

    Returns
    -------
    list of str
        The names of the algorithms of :data:`mpilab.sim.OUR_ALGORITHMS` that take `ranks`
        ranks.
    """
    return [a for a in sim.OUR_ALGORITHMS["allgather"]
            if collectives.ALGORITHMS["allgather"][a].admissible(ranks) is None]


# ---------------------------------------------------------------------------------------
# the simulated times


def _placement(placement: str) -> str:
    """SMPI's map_by for a placement name of :data:`PLACEMENTS`."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not "
                         f"{placement!r:.60}")
    return PLACEMENTS[placement]


def _simulate(p: int, sizes: Sequence[int], placement: str, progress=None) -> list[dict]:
    """Our admissible algorithms and the library's choice, one simulated job each."""
    return sim.collective("allgather", [*admissible(p), "library"], sizes, ranks=p,
                          platform=PLATFORM, map_by=_placement(placement), library="ompi",
                          reps=1, timeout=SIM_TIMEOUT, progress=progress)


def _key(p: int, sizes: Sequence[int], placement: str) -> str:
    plat = sim.platform(PLATFORM)
    digest = hashlib.sha256(plat.path.read_bytes() + sim.version().encode()).hexdigest()[:12]
    return (f"sim-allgather-{PLATFORM}-{_placement(placement)}-{p}-"
            f"{'-'.join(map(str, sizes))}-{digest}")


def _reference_records() -> list[dict]:
    recs = list(sim.load_reference(REFERENCE)["records"])
    try:
        hidden = paths.course_root() / HIDDEN_REFERENCE
    except paths.CourseNotFound:
        return recs
    if hidden.exists():  # the instructors' side: absent from the students' edition
        recs += json.loads(hidden.read_text())["records"]
    return recs


def _reference(p: int, sizes: Sequence[int], placement: str) -> list[dict]:
    map_by = _placement(placement)
    recs = [r for r in _reference_records()
            if r["ranks"] == p and r["map_by"] == map_by and r["size_bytes"] in sizes]
    have = {r["size_bytes"] for r in recs}
    missing = [n for n in sizes if n not in have]
    if missing:
        raise grading.Ungradable(f"the saved simulations (reference/simulated/{REFERENCE}.json, "
                           f"{HIDDEN_REFERENCE}) have none of {p} ranks ({placement} "
                           f"placement) at {missing} B: regenerate them where SimGrid runs "
                           "(mpilab.grading.simulated.write_reference(cases, path))")
    return recs


def simulated(ranks: int, sizes: Iterable[int], placement: str = "cyclic", *,
              progress=None) -> tuple[dict, str]:
    """Simulated µs per call of every admissible algorithm on `ranks` ranks placed
    `placement` (``"cyclic"`` or ``"block"``), and where the numbers come from.

    Simulated once per grading session where SimGrid runs, else read from the course's
    saved simulations.

    Parameters
    ----------
    ranks : int
        Number of ranks.
    sizes : iterable of int
        Block sizes, in bytes.
    placement : {"cyclic", "block"}, optional
        Where the ranks are (default "cyclic", the paper's).
    progress : bool or callable, optional
        A line of progress per simulated job: True prints it, a callable is called with
        it, None (the default) says nothing.

    Returns
    -------
    (dict, str)
        ``{size: {alg: µs}}`` (our algorithms, plus ``"library"``: SMPI's port of Open
        MPI's decision) and a sentence: simulated for this session with SimGrid, or the
        course's reference data and why.
    """
    sizes = tuple(int(n) for n in sizes)
    _placement(placement)
    label = sim.label(PLATFORM)
    ok, why = sim.available()
    if ok:
        try:
            recs = cached(_key(ranks, sizes, placement),
                           lambda: _simulate(ranks, sizes, placement, progress))
            source = f"{label}, simulated with SimGrid {sim.version()} for this session"
        except (sim.SimUnavailable, RuntimeError, OSError) as exc:
            ok, why = False, f"the simulation failed here: {str(exc).splitlines()[0][:200]}"
    if not ok:
        recs = _reference(ranks, sizes, placement)
        source = (f"{label}, reference data (reference/simulated/{REFERENCE}.json, "
                  f"simulated with SimGrid on the course's machine; not simulated here: "
                  f"{why})")
    table: dict[int, dict[str, float]] = {n: {} for n in sizes}
    for r in recs:
        if r["size_bytes"] in table:
            alg = r["impl"].split(":", 1)[1] if r["impl"].startswith("mpilab:") else "library"
            table[r["size_bytes"]][alg] = float(r["t_us_median"])
    return table, source


# ---------------------------------------------------------------------------------------
# pure Python: what is wrong with a choice


def choice_problem(choice, ranks: int) -> str | None:
    """What is wrong with `choice` as the name of an allgather to run on `ranks` ranks, or None.

    Parameters
    ----------
    choice : object
        What the student's function returned: it should be a name of
        :data:`mpilab.collectives.ALGORITHMS` ``["allgather"]``.
    ranks : int
        Number of ranks.

    Returns
    -------
    str or None
        What is wrong (not a str, no such algorithm, or not admissible on `ranks` ranks),
        in words; None when the choice can run.
    """
    names = tuple(collectives.ALGORITHMS["allgather"])
    if type(choice) is not str:
        return (f"return the name of an algorithm (a str such as 'ring'), not "
                f"{type(choice).__name__} {choice!r:.60}")
    if choice not in names:
        return (f"returned {choice!r:.60}, which is not one of the allgather algorithms: "
                f"{', '.join(names)}")
    why = collectives.ALGORITHMS["allgather"][choice].admissible(ranks)
    if why:
        return (f"returned {choice!r}, which cannot run on {ranks} ranks ({why}); choose among "
                f"collectives.admissible('allgather', {ranks}): {', '.join(admissible(ranks))}")
    return None


_WHERE = {"cyclic": "placed cyclically", "block": "placed in blocks (node 0 first)"}


def slow_choices(chosen: Mapping[int, str], times: Mapping[int, Mapping[str, float]],
                 ranks: int, placement: str = "cyclic",
                 tolerance: float = TOLERANCE) -> list[str]:
    """One line per size where the chosen algorithm is more than `tolerance` times slower
    than the fastest admissible one (simulated), naming the placement, the size and the
    times.

    Parameters
    ----------
    chosen : mapping of int to str
        ``{block bytes: algorithm chosen}``.
    times : mapping of int to mapping of str to float
        ``{block bytes: {algorithm: simulated µs}}``, as :func:`simulated` returns them
        (``"library"`` is left out of the comparison).
    ranks : int
        Number of ranks.
    placement : {"cyclic", "block"}, optional
        The placement simulated (default "cyclic"), for the message.
    tolerance : float, optional
        How many times the fastest time a choice may take (default :data:`TOLERANCE`).

    Returns
    -------
    list of str
        One line per size where the choice is too slow; empty when none is.
    """
    lines = []
    for n, alg in chosen.items():
        ours = {a: t for a, t in times[n].items() if a != "library"}
        best = min(ours, key=ours.get)
        ratio = ours[alg] / ours[best]
        if ratio <= tolerance:
            continue
        every = " | ".join(f"{a} {t:,.0f}" for a, t in sorted(ours.items(), key=lambda x: x[1]))
        lines.append(f"on {ranks} ranks {_WHERE[placement]}, blocks of {n:,} B "
                     f"({_fmt_bytes(n)}): you chose {alg}, "
                     f"simulated {ours[alg]:,.0f} µs per call; the fastest, {best}, takes "
                     f"{ours[best]:,.0f} µs: yours is {ratio:.1f} times that (at most "
                     f"{tolerance:g} times counts).\n    simulated µs per call: {every}")
    return lines


# ---------------------------------------------------------------------------------------
# the graded check, and the try-it view


def _cases(cases) -> list[tuple[int, str, tuple[int, ...]]]:
    items = cases.items() if isinstance(cases, Mapping) else cases
    out = []
    for (p, placement), sizes in items:
        _placement(placement)
        out.append((int(p), placement, tuple(int(n) for n in sizes)))
    return out


def _ask(choose: Callable, p: int, sizes: Sequence[int], placement: str) -> dict[int, str]:
    __tracebackhide__ = True
    chosen = {}
    for n in sizes:
        got = grading.call_local(choose, p, n, placement, timeout=CALL_TIMEOUT)
        problem = choice_problem(got, p)
        grading.expect(problem is None,
                       f"choose_allgather({p}, {n}, {placement!r}) {problem}")
        chosen[n] = got
    return chosen


def check_choose_allgather(choose: Callable, cases, *,
                           tolerance: float = TOLERANCE) -> dict:
    """`choose(p, block_bytes, placement)` names, at every case, an algorithm that runs on
    p ranks and whose simulated time is at most `tolerance` times the fastest admissible
    one's.

    Parameters
    ----------
    choose : callable
        The student's ``choose_allgather(p, block_bytes, placement) -> name``.
    cases : mapping or iterable of ((int, str), sequence of int)
        ``{(p, placement): (block sizes in bytes)}``, placement ``"cyclic"`` or
        ``"block"``.
    tolerance : float
        How many times the fastest simulated time a choice may take.

    Returns
    -------
    dict
        ``source`` (where the simulated times come from, to print) and ``chosen``:
        ``{(p, placement, size): (alg, its µs, fastest alg, fastest µs)}``.

    Raises
    ------
    mpilab.grading.CheckFailed
        When the function raises, times out, returns something that is not the name of
        an algorithm that runs on p ranks, or (naming each size and the simulated times)
        chooses one more than `tolerance` times slower than the fastest.
    """
    __tracebackhide__ = True
    cases = _cases(cases)
    asked = [(p, pl, sizes, _ask(choose, p, sizes, pl))  # fail fast
             for p, pl, sizes in cases]
    out, wrong, sources = {}, [], []
    for p, placement, sizes, chosen in asked:
        times, source = simulated(p, sizes, placement)
        sources.append(source)
        wrong += slow_choices(chosen, times, p, placement, tolerance)
        for n, alg in chosen.items():
            ours = {a: t for a, t in times[n].items() if a != "library"}
            best = min(ours, key=ours.get)
            out[(p, placement, n)] = (alg, ours[alg], best, ours[best])
    source = "; ".join(dict.fromkeys(sources))
    grading.expect(not wrong, "choose_allgather is too slow at the paper's scale (two "
                   "nodes of 32 cores, one link between them):\n  "
                   + "\n  ".join(wrong)
                   + "\nCount, step by step, the messages that cross the link between the "
                   "nodes at that placement: each crossing pays ALPHA_US, and the bytes "
                   "of every message crossing one way in the same step share the link's "
                   f"BETA_MBPS.\n(Times: {source}.)")
    return {"source": source, "chosen": out}


def show_choices(choose: Callable, ranks: int = 64,
                 sizes: Sequence[int] = VISIBLE[(64, "cyclic")],
                 placements: Sequence[str] = tuple(PLACEMENTS), *,
                 tolerance: float = TOLERANCE) -> None:
    """Not graded: per placement, a table of every algorithm's simulated time, your choice
    marked.

    Runs the simulation where SimGrid is installed (seconds, once per session) and reads
    the course's reference data where it is not, and says which.

    Parameters
    ----------
    choose : callable
        The student's ``choose_allgather(p, block_bytes, placement) -> name``, called
        here; what it raises is printed.
    ranks : int, optional
        Number of ranks (default 64).
    sizes : sequence of int, optional
        Block sizes, in bytes (default the visible check's).
    placements : sequence of str, optional
        Placements to show, "cyclic" and/or "block" (default both).
    tolerance : float, optional
        How many times the fastest time a choice may take (default :data:`TOLERANCE`).
    """
    if grading.not_while_grading():
        return None
    print(f"{sim.label(PLATFORM)}: allgather on {ranks} ranks of the allgather paper's two "
          f"nodes; µs per call. A simulation, not a measurement: it leaves out "
          f"{sim.LEAVES_OUT}.")
    ok, why = sim.available()
    if not ok:
        print(f"SimGrid is not installed here ({why.split(':')[0]}): this is reference "
              f"data, the same simulation run on the course's machine.")
    for placement in placements:
        _show_one(choose, ranks, tuple(sizes), placement, tolerance)
    return None


def _show_one(choose: Callable, p: int, sizes: tuple[int, ...], placement: str,
              tolerance: float) -> None:
    nodes = sim.hostfile(sim.platform(PLATFORM), p, PLACEMENTS["block"])[1]
    half = nodes.count(0)  # node 0 is filled first: its cores, or half of an oversubscription
    where = {"cyclic": f"cyclic placement (rank r on node r % 2, the paper's; map_by "
                       f"{PLACEMENTS['cyclic']})",
             "block": f"block placement (ranks 0-{half - 1} on node 0, {half}-{p - 1} on "
                      f"node 1; map_by {PLACEMENTS['block']})"}[placement]
    print(f"\n{p} ranks, {where}; {sim.label(PLATFORM)}:")
    try:
        times, source = simulated(p, sizes, placement, progress=True)
    except (RuntimeError, OSError) as exc:
        print(f"No simulated times: {exc}")
        return
    chosen, errors = {}, {}
    for n in sizes:
        try:
            got = choose(p, n, placement)
        except Exception as exc:  # noqa: BLE001 - shown, not raised: this is a try-it view
            errors[n] = f"raised {type(exc).__name__}: {exc}"
            continue
        problem = choice_problem(got, p)
        if problem:
            errors[n] = problem
        else:
            chosen[n] = got
    algs = [*admissible(p), "library"]
    width = max(len(a) for a in algs) + 2
    head = "".join(f"{_fmt_bytes(n):>14}" for n in sizes)
    print(f"{'algorithm':<{width}}{head}")
    for a in algs:
        cells = []
        for n in sizes:
            ours = {k: t for k, t in times[n].items() if k != "library"}
            mark = ("*" if a != "library" and ours[a] == min(ours.values()) else " ") + (
                "<" if chosen.get(n) == a else " ")
            cells.append(f"{times[n][a]:>12,.1f}{mark}")
        print(f"{a:<{width}}" + "".join(cells))
    print("* fastest of our algorithms at that size   < your choice   library: SMPI's "
          "port of Open MPI's decision rules (not one of yours to choose)")
    for n in sizes:
        if n in errors:
            print(f"{_fmt_bytes(n)}: choose_allgather({p}, {n}, {placement!r}) {errors[n]}")
            continue
        if n not in chosen:
            continue
        ours = {k: t for k, t in times[n].items() if k != "library"}
        ratio = ours[chosen[n]] / min(ours.values())
        print(f"{_fmt_bytes(n)}, {placement}: you chose {chosen[n]}, {ratio:.2f} times the "
              "fastest: " + ("within" if ratio <= tolerance else "NOT within")
              + f" {tolerance:g} times")
    print(f"(Times: {source}.)")


# ---------------------------------------------------------------------------------------
# the reference for machines without SimGrid


def reference_records(cases: Mapping[tuple[int, str], Sequence[int]] = VISIBLE,
                      progress=True) -> list[dict]:
    """Every simulation of `cases` (``{(ranks, placement): sizes}``), made now (SimGrid
    needed): the records of a reference JSON.

    Parameters
    ----------
    cases : mapping, optional
        ``{(ranks, placement): block sizes in bytes}`` (default :data:`VISIBLE`).
    progress : bool or callable, optional
        A line of progress per simulated job: True (the default) prints it, a callable
        is called with it, None says nothing.

    Returns
    -------
    list of dict
        The simulated records (our admissible algorithms and the library's choice, per
        case and size), as :func:`mpilab.sim.collective` makes them.
    """
    recs = []
    for (p, placement), sizes in cases.items():
        recs += _simulate(p, sizes, placement, progress)
    return recs


def write_reference(cases: Mapping[tuple[int, str], Sequence[int]] = VISIBLE,
                    path: str | Path | None = None, progress=True) -> Path:
    """Simulate `cases` and write them to `path`: by default the visible cases to
    ``reference/simulated/lab06-allgather-paper.json``. The hidden cases (from the source
    notebook's hidden tests) go to :data:`HIDDEN_REFERENCE`, never to reference/, which
    students get.

    Parameters
    ----------
    cases : mapping, optional
        ``{(ranks, placement): block sizes in bytes}`` (default :data:`VISIBLE`).
    path : str or Path, optional
        The file to write; by default the visible reference in
        ``reference/simulated/``.
    progress : bool or callable, optional
        A line of progress per simulated job: True (the default) prints it, a callable
        is called with it, None says nothing.

    Returns
    -------
    Path
        The file written (JSON: ``meta`` and ``records``).
    """
    path = Path(path) if path else sim.reference_dir() / f"{REFERENCE}.json"
    recs = reference_records(cases, progress)
    meta = sim.meta(PLATFORM, placements=PLACEMENTS,
                    cases={f"{p} {pl}": list(s) for (p, pl), s in cases.items()},
                    reps=1, library="ompi", purpose="lab 06, Part F: the grader's "
                    "verdicts where SimGrid is missing, and the try-it table")
    path.write_text(json.dumps({"meta": meta, "records": recs}, indent=1) + "\n")
    return path
