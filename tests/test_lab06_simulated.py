"""Lab 06, Part F: choosing an allgather for the paper's machine, graded against SimGrid.

The check (:mod:`mpilab.grading.simulated`) runs here in-process on plain Python choices,
at two placements of the ranks (cyclic, the paper's, and block): the lab's own solution (a
rule from the link picture: which messages cross between the nodes) passes at every
graded case; every constant answer fails (Bruck everywhere, right at cyclic placement,
with a hint naming the block-placement sizes), and so does the libraries' rule of thumb
(the ring for large blocks), with the sizes and the simulated times; one that raises, returns something that is not a name, names an
algorithm that cannot run on the ranks, or never returns fails with its own message.
The simulation is made once per session (the grader's private cache), and without
SimGrid, or when it fails, the reference JSON is used and the check says so; the
reference holds every graded case and equals what the simulator gives now.

Under nbgrader (slow), in one grading session: a wrong choice and a hostile one (it
patches the check in its own kernel, and names an algorithm that cannot run on the hidden
62 ranks) lose exactly this part's 2 points, with the hint in the feedback. (A choice
that never returns is cut by call_local's timeout, in the sandbox as in lab 07's tests.)
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import stat
import time
from pathlib import Path

import pytest
from grading_batch import graded_notebook
from lab_grading import errors_of, leftover_processes, printed_by

from mpilab import collectives, grading, sim
from mpilab.autograder.course import REPO, full, make_course, nbgrader, scores, solutions, submit
from mpilab.autograder.edition import hidden_cases
from mpilab.grading import measured
from mpilab.grading import simulated as S

LAB6 = "lab06-allgather"
NOTEBOOK = REPO / "labs" / LAB6 / f"{LAB6}.ipynb"
HAS_SIM, WHY_NOT = sim.available()
VISIBLE = S.VISIBLE
HIDDEN = hidden_cases()  # written only in the source notebook's hidden tests
GRADED = {**VISIBLE, **HIDDEN}


def _cell(grade_id: str) -> str:
    import nbformat

    nb = nbformat.read(NOTEBOOK, 4)
    return next(c.source for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def model_choice():
    """The notebook's own solution, with the α and β its locked cell gives."""
    ns = {"collectives": collectives}
    given = [ln for ln in _cell("paper_platform").splitlines()
             if ln.startswith(("ALPHA_", "BETA_"))]
    assert len(given) == 4, given
    exec("\n".join(given), ns)
    exec(compile(solutions(LAB6)["choose_allgather"], "choose_allgather", "exec"), ns)
    return ns["choose_allgather"]


def _cases_in(src: str) -> list[dict]:
    return [ast.literal_eval(m) for m in re.findall(r"choose_allgather,\s*(\{[^}]*\})", src)]


def rule_of_thumb(p, block_bytes, placement):
    """What libraries do: logarithmic for small blocks, the ring for large ones."""
    return "bruck" if block_bytes < 1024 else "ring"


def always_bruck(p, block_bytes, placement):
    """Right at cyclic placement, at every size: the answer that ignores the placement."""
    return "bruck"


# ---------------------------------------------------------------------------------------
# the notebook, the module and the reference agree


def test_the_notebook_grades_exactly_the_cases_the_reference_holds():
    shown, hidden = _cell("test_choose_allgather").split("### BEGIN HIDDEN TESTS")
    assert _cases_in(shown) == [VISIBLE] and _cases_in(hidden) == [HIDDEN]
    assert {pl for _, pl in VISIBLE} == {pl for _, pl in HIDDEN} == {"cyclic", "block"}
    assert {p for p, _ in HIDDEN}.isdisjoint({p for p, _ in VISIBLE})
    recs = S._reference_records()
    shown = {(r["ranks"], r["map_by"]) for r in sim.load_reference(S.REFERENCE)["records"]}
    assert shown == {(p, S.PLACEMENTS[pl]) for p, pl in VISIBLE}  # what students get
    saved = json.loads((REPO / S.HIDDEN_REFERENCE).read_text())
    assert {(r["ranks"], r["map_by"]) for r in saved["records"]} == {
        (p, S.PLACEMENTS[pl]) for p, pl in HIDDEN}  # the instructors' side
    for (p, placement), sizes in GRADED.items():
        for n in sizes:
            have = {r["impl"] for r in recs if r["ranks"] == p and r["size_bytes"] == n
                    and r["map_by"] == S.PLACEMENTS[placement]}
            want = {f"mpilab:{a}" for a in S.admissible(p)} | {"library:ompi"}
            assert have == want, (p, placement, n, have ^ want)
    assert len(recs) == sum(len(s) * (len(S.admissible(p)) + 1)
                            for (p, _), s in GRADED.items())
    assert all(r["label"] == sim.label("allgather-paper") for r in recs)
    assert S.PLACEMENTS == {"cyclic": "node", "block": "slot"}


def test_at_block_placement_the_winner_changes_with_the_size(no_simgrid):
    """Every graded set at block placement has two sizes whose fastest algorithms differ,
    each more than the tolerance ahead of the other's winner: no constant answer holds."""
    for (p, placement), sizes in GRADED.items():
        times = S.simulated(p, sizes, placement)[0]
        ours = {n: {a: t for a, t in times[n].items() if a != "library"} for n in sizes}
        best = {n: min(ours[n], key=ours[n].get) for n in sizes}
        if placement == "cyclic":  # the logarithmic algorithms, at every size
            assert set(best.values()) <= {"bruck", "recursive_doubling"}, (p, best)
            continue
        assert all(
            any(ours[m][best[n]] > S.TOLERANCE * ours[m][best[m]] for m in sizes)
            for n in sizes), (p, best)


def test_alpha_and_beta_are_the_platform_files_numbers():
    plat = sim.platform("allgather-paper")
    lat_us = float(plat.params["lat"].removesuffix("us"))
    bw_MBps = float(plat.params["bw"].removesuffix("GBps")) * 1000
    assert (S.ALPHA_US, S.BETA_MBPS) == (2 * lat_us, bw_MBps)  # two private links each way
    assert plat.params["sharing_policy"] == "SPLITDUPLEX"  # one link each way, shared
    src = _cell("paper_platform")
    assert f"ALPHA_US = {S.ALPHA_US}" in src and f"BETA_MBPS = {S.BETA_MBPS}" in src
    node_lat = float(plat.params["loopback_lat"].removesuffix("us"))
    node_bw = float(plat.params["loopback_bw"].removesuffix("GBps")) * 1000
    assert f"ALPHA_NODE_US = {node_lat}" in src and f"BETA_NODE_MBPS = {node_bw}" in src


def test_inadmissible_and_unknown_names_are_explained():
    assert S.choice_problem("bruck", 62) is None
    assert "cannot run on 62 ranks" in S.choice_problem("recursive_doubling", 62)
    assert "power-of-two" in S.choice_problem("recursive_doubling", 62)
    assert "cannot run on 63 ranks" in S.choice_problem("neighbor_exchange", 63)
    assert "not one of the allgather algorithms" in S.choice_problem("Bruck", 64)
    assert "not one of the allgather algorithms" in S.choice_problem("library", 64)
    assert "not int" in S.choice_problem(3, 64)
    assert "not NoneType" in S.choice_problem(None, 64)


def test_slow_choices_name_the_size_and_every_time():
    times = {2048: {"bruck": 50.0, "ring": 1800.0, "linear": 1300.0, "library": 1.0}}
    assert S.slow_choices({2048: "bruck"}, times, 64) == []
    assert S.slow_choices({2048: "ring"}, {2048: {"bruck": 100.0, "ring": 125.0}}, 64) == []
    (line,) = S.slow_choices({2048: "ring"}, times, 64)
    assert "on 64 ranks placed cyclically, blocks of 2,048 B" in line
    assert "you chose ring, simulated 1,800 µs" in line
    (line,) = S.slow_choices({2048: "ring"}, times, 64, "block")
    assert "on 64 ranks placed in blocks (node 0 first), blocks of 2,048 B" in line
    assert "the fastest, bruck, takes 50 µs" in line and "36.0 times" in line
    assert "bruck 50 | linear 1,300 | ring 1,800" in line  # the library is not a choice


@pytest.mark.skipif(not HAS_SIM, reason=WHY_NOT)
def test_the_reference_is_what_the_simulator_gives_now():
    """Deterministic (computation off): the saved numbers to the last digit. Through the
    grader's per-session cache, so the lab's autogrades in the same run reuse it."""
    t0 = time.perf_counter()
    for (p, placement), sizes in GRADED.items():
        now, source = S.simulated(p, sizes, placement)
        assert "simulated with SimGrid" in source, source
        saved = {}
        for r in S._reference(p, sizes, placement):
            alg = r["impl"].split(":", 1)[1] if r["impl"].startswith("mpilab:") else "library"
            saved.setdefault(r["size_bytes"], {})[alg] = r["t_us_median"]
        for n in sizes:
            assert now[n].keys() == saved[n].keys()
            for alg, t in now[n].items():
                assert math.isclose(t, saved[n][alg], rel_tol=1e-9), (p, placement, n, alg)
    print(f"\n[sim] every graded case in {time.perf_counter() - t0:.1f} s (cached: 0 s)")


# ---------------------------------------------------------------------------------------
# the check, in-process (the same functions the grader's kernel runs)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """The per-session cache in an empty folder of this test's own."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setattr(measured, "cache_dir", lambda: d)
    monkeypatch.setattr(measured, "_CACHE", {})
    return d


@pytest.fixture
def no_simgrid(monkeypatch):
    monkeypatch.setattr(sim, "available", lambda: (False, "no smpicc and smpirun (SimGrid "
                                                   "SMPI) found: install SimGrid"))


def test_the_model_choice_gets_the_points(no_simgrid):
    got = S.check_choose_allgather(model_choice(), GRADED)
    logarithmic = {p: "recursive_doubling" if p in (64, 128) else "bruck" for p in (62, 64, 128)}
    want = {(p, pl, n): logarithmic[p] for (p, pl), sizes in GRADED.items() for n in sizes
            if pl == "cyclic"}
    want |= {(64, "block", 32): "recursive_doubling", (64, "block", 2048): "neighbor_exchange",
             (64, "block", 131072): "neighbor_exchange",  # ties with the ring (1.003 times)
             (62, "block", 256): "bruck", (62, "block", 4096): "neighbor_exchange",
             (62, "block", 16384): "neighbor_exchange",
             (128, "block", 256): "recursive_doubling", (128, "block", 4096): "neighbor_exchange"}
    assert {k: v[0] for k, v in got["chosen"].items()} == want
    assert all(v[1] <= 1.01 * v[3] for v in got["chosen"].values()), got["chosen"]
    # the rule, not a table: it answers at ranks and sizes the lab never grades
    choose = model_choice()
    assert choose(64, 1 << 20, "block") == "ring" and choose(63, 8192, "block") == "ring"
    assert choose(256, 128, "block") == "recursive_doubling"
    assert choose(256, 512, "block") == "neighbor_exchange"  # n p > alpha beta
    assert choose(96, 1 << 20, "cyclic") == "bruck"


def test_a_constant_answer_fails_at_block_placement(no_simgrid):
    S.check_choose_allgather(always_bruck, {c: s for c, s in GRADED.items()
                                            if c[1] == "cyclic"})  # right there
    for cases in (VISIBLE, HIDDEN):
        with pytest.raises(grading.CheckFailed) as exc:
            S.check_choose_allgather(always_bruck, cases)
        msg = str(exc.value)
        assert "placed cyclically" not in msg, msg
        assert "placed in blocks (node 0 first), blocks of" in msg, msg
        assert "Count, step by step, the messages that cross the link" in msg, msg
        assert "reference data" in msg, msg
    msg = str(exc.value)  # the hidden cases
    assert "on 62 ranks placed in blocks (node 0 first), blocks of 4,096 B (4 KiB): " \
           "you chose bruck" in msg, msg
    assert "the fastest, neighbor_exchange" in msg and "the fastest, recursive_doubling" in msg
    for const in ("recursive_doubling", "neighbor_exchange", "ring"):
        with pytest.raises(grading.CheckFailed):
            S.check_choose_allgather(lambda p, n, pl, c=const: c, VISIBLE)


def test_the_rule_of_thumb_fails_at_both_placements(no_simgrid):
    with pytest.raises(grading.CheckFailed) as exc:
        S.check_choose_allgather(rule_of_thumb, VISIBLE)
    msg = str(exc.value)
    assert "placed cyclically, blocks of 2,048 B (2 KiB): you chose ring" in msg, msg
    assert "placed cyclically, blocks of 131,072 B (128 KiB): you chose ring" in msg, msg
    assert "placed in blocks (node 0 first), blocks of 32 B (32 B): you chose bruck" in msg
    assert "placed in blocks (node 0 first), blocks of 2,048 B (2 KiB): you chose ring" in msg
    assert "blocks of 131,072 B (128 KiB): you chose ring" in msg  # block: the ring wins
    assert msg.count("you chose") == 4, msg
    assert "the fastest, bruck" in msg and "simulated µs per call:" in msg, msg


def test_hostile_choices_fail_with_their_own_message(no_simgrid, monkeypatch):
    monkeypatch.setattr(S, "CALL_TIMEOUT", 1)

    def raises(p, n, placement):
        raise RuntimeError("no idea")

    def sleeps(p, n, placement):
        while True:
            time.sleep(0.1)

    cases = [(raises, grading.RaisedError, "raised RuntimeError: no idea"),
             (lambda p, n, pl: "recursive_doubling", grading.CheckFailed,
              "choose_allgather(62, 256, 'cyclic') returned 'recursive_doubling', which "
              "cannot run on 62 ranks"),
             (lambda p, n, pl: ["bruck"], grading.CheckFailed, "not list"),
             (lambda p, n, pl: object(), grading.BadResult, "object"),
             (lambda p, n: "bruck", grading.RaisedError, "TypeError"),  # no placement
             (sleeps, grading.TimedOut, "did not return within 1 s")]
    try:
        for func, kind, said in cases:
            with pytest.raises(kind) as exc:
                S.check_choose_allgather(func, HIDDEN)
            assert said in str(exc.value), (said, str(exc.value))
    finally:
        grading.forget_timeouts()
    # the power of two is fine for recursive doubling, which ties with Bruck there
    got = S.check_choose_allgather(lambda p, n, pl: "recursive_doubling",
                                   {(128, "cyclic"): GRADED[(128, "cyclic")]})
    assert all(alg == "recursive_doubling" for alg, *_ in got["chosen"].values())
    with pytest.raises(ValueError, match="placement must be one of cyclic, block"):
        S.check_choose_allgather(always_bruck, {(64, "slot"): (32,)})


def test_without_simgrid_the_reference_is_used_and_said(no_simgrid, capsys):
    got = S.check_choose_allgather(model_choice(), VISIBLE)
    assert got["source"].startswith(sim.label("allgather-paper") + ", reference data")
    assert "not simulated here: no smpicc and smpirun" in got["source"]
    S.show_choices(rule_of_thumb)
    out = capsys.readouterr().out
    assert sim.label("allgather-paper") in out and "not a measurement" in out
    assert sim.LEAVES_OUT in out
    assert "SimGrid is not installed here" in out and "reference data" in out
    cyclic, block = out.split("64 ranks, block placement (ranks 0-31 on node 0, 32-63 on node 1")
    assert "64 ranks, cyclic placement (rank r on node r % 2, the paper's" in cyclic
    assert re.search(r"^ring\s+965\.9\s+1,778\.7 <\s+53,807\.2 <$", cyclic, re.M), out
    assert "2 KiB, cyclic: you chose ring, 33.31 times the fastest: NOT within 1.25 times" in out
    assert re.search(r"^ring\s+947\.1\s+972\.5 <\s+2,604\.3\*<$", block, re.M), out
    assert re.search(r"^neighbor_exchange\s+250\.2\s+286\.5\*\s+2,610\.6\s*$", block, re.M)
    assert "128 KiB, block: you chose ring, 1.00 times the fastest: within 1.25 times" in out
    assert block.count(sim.label("allgather-paper")) == 2  # the heading, the source


def test_try_it_does_not_run_while_grading(monkeypatch, capsys):
    monkeypatch.setenv("MPILAB_GRADING", "1")
    monkeypatch.setattr(S, "simulated", lambda *a, **k: pytest.fail("simulated while grading"))
    S.show_choices(model_choice())
    assert "not run while grading" in capsys.readouterr().out


def test_simulated_once_per_session_in_a_private_folder(private_cache, monkeypatch):
    if not HAS_SIM:
        monkeypatch.setattr(sim, "available", lambda: (True, ""))
        monkeypatch.setattr(sim, "version", lambda: "3.32")
    made = []

    def simulate(p, sizes, placement, progress=None):  # the reference's records, as made
        made.append((p, placement))
        return S._reference(p, sizes, placement)

    monkeypatch.setattr(S, "_simulate", simulate)
    sizes = GRADED[(64, "cyclic")]
    first, source = S.simulated(64, sizes)
    assert made == [(64, "cyclic")] and "simulated with SimGrid" in source
    files = list(private_cache.glob("*.json"))  # (beside it, the lock its makers share)
    assert len(files) == 1 and files[0].name.startswith("sim-allgather-allgather-paper-node-64-")
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700
    measured._CACHE.clear()  # the next notebook of the session: a new kernel, the same folder
    assert S.simulated(64, sizes)[0] == first and made == [(64, "cyclic")]
    block = S.simulated(64, sizes, "block")[0]  # another placement: another simulation
    assert made == [(64, "cyclic"), (64, "block")] and block != first
    assert len([f for f in private_cache.glob("*.json")
                if f.name.startswith("sim-allgather-allgather-paper-slot-64-")]) == 1


def test_a_failing_simulation_falls_back_to_the_reference_and_says_why(private_cache,
                                                                       monkeypatch):
    monkeypatch.setattr(sim, "available", lambda: (True, ""))
    monkeypatch.setattr(sim, "version", lambda: "3.32")

    def broken(p, sizes, placement, progress=None):
        raise RuntimeError("simulated mpilab-coll on 64 ranks (allgather-paper) failed")

    monkeypatch.setattr(S, "_simulate", broken)
    times, source = S.simulated(64, GRADED[(64, "cyclic")])
    assert "reference data" in source and "the simulation failed here" in source
    assert min(times[2048], key=times[2048].get) == "bruck"
    times, source = S.simulated(64, GRADED[(64, "block")], "block")
    assert "reference data" in source
    assert min(times[2048], key=times[2048].get) == "neighbor_exchange"


# ---------------------------------------------------------------------------------------
# under nbgrader: only this part is lost


WRONG = '''
def choose_allgather(p, block_bytes, placement):
    """Bruck everywhere: right at cyclic placement, blind to the placement."""
    return "bruck"
'''

HOSTILE = '''
import mpilab.grading.allgather as _a
import mpilab.grading.simulated as _s

_s.check_choose_allgather = lambda *args, **kwargs: {"source": "", "chosen": {}}
_a.check_choose_allgather = _s.check_choose_allgather  # as the notebook sees it
_s.choice_problem = lambda *args, **kwargs: None
_s.TOLERANCE = 1e9


def choose_allgather(p, block_bytes, placement):
    """Right on the visible 64 ranks; recursive doubling cannot run on the hidden 62."""
    if placement == "block" and block_bytes >= 1024:
        return "neighbor_exchange"
    return "recursive_doubling"
'''


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return make_course(tmp_path_factory.mktemp("course6f"), [LAB6])


@pytest.mark.graded_timing
@pytest.mark.slow
def test_wrong_and_hostile_choices_lose_only_this_part(course):
    for student, answer in (("wrong", WRONG), ("hostile", HOSTILE)):
        submit(course, LAB6, student, {**solutions(LAB6), "choose_allgather": answer})
    assert sum(full(LAB6).values()) == 17
    t0 = time.perf_counter()
    res = nbgrader(course, "autograde", LAB6, "--force")  # one grading session, both
    wall = time.perf_counter() - t0
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    want = {**full(LAB6), "test_choose_allgather": 0.0}
    assert scores(course, LAB6, ["wrong", "hostile"]) == {"wrong": want, "hostile": want}
    assert not leftover_processes(course)
    err = errors_of(graded_notebook(course, LAB6, "wrong"), "test_choose_allgather")
    assert "placed in blocks (node 0 first), blocks of 2,048 B (2 KiB): you chose bruck" in err
    assert "placed cyclically" not in err, err
    assert "the fastest, neighbor_exchange" in err and "simulated µs per call" in err, err
    assert sim.label("allgather-paper") in err, err
    nb = graded_notebook(course, LAB6, "hostile")
    err = errors_of(nb, "test_choose_allgather")
    assert "returned 'recursive_doubling', which cannot run on 62 ranks" in err, err
    assert "choose_allgather(62, 256, 'cyclic')" in err, err
    # the visible check passed (the grader's check, not the patched one), then the hidden
    assert "within 1.25 times the fastest algorithm on 64 ranks" in printed_by(
        nb, "test_choose_allgather")
    fb = nbgrader(course, "generate_feedback", LAB6, "--force")
    assert fb.returncode == 0, fb.stdout + fb.stderr
    html = (course / "autograder" / "feedback" / "wrong" / LAB6 / f"{LAB6}.html").read_text()
    assert "you chose bruck" in html
    print(f"\n[wall] {LAB6}: a wrong and a hostile Part F autograded in {wall:.1f} s")
