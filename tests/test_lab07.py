"""Lab 07 (across the link) under nbgrader, end to end, as tests/test_labs.py.

In a temporary copy of the course: the source notebook validates (as root, on a link
measured across freshly made emulated nodes); the released stubs fail every test (on the
reference data, as on a machine without root); then one ``nbgrader autograde`` run
grades a correct submission (full marks), wrong ones (one line through every size, both
directions of a link added up, a prediction in µs, no latency, a fixed placement, an
endless search) that lose exactly the parts they get wrong, and a hostile one that
patches the checks and the measurement in its own kernel and still scores only what its
honest parts earn. Nothing outlives the grading: no process, no emulated node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_batch import assert_locked_cells_ran, graded_notebook
from hostile_snippets import (
    LAB07_BEST_PLACEMENT_LOOKUP,
    LAB07_FIT_LINK_LOOKUP,
    lab07_predict_hard_coded,
)
from lab_grading import (
    assert_source_validates,
    errors_of,
    leftover_processes,
    printed_by,
    released_failing_every_test,
)
from own_fabrics import OwnFabrics
from side_by_side_grading import grade_all

from mpilab import netlab
from mpilab.autograder.course import full, make_course, solutions

pytestmark = pytest.mark.slow

LAB7 = "lab07-across-the-link"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return make_course(tmp_path_factory.mktemp("course07"), [LAB7])


def no_fabric_left(own: OwnFabrics) -> bool:
    """No emulated node that this test's gradings made outlived the process that made it
    (the grader's, nbgrader's). Modules beside this one make their own, and leave some
    stale on purpose: those are not this test's."""
    return not own.stale()


@pytest.mark.measures
def test_lab07_source_validates_on_a_fresh_link(course):
    if netlab.available() is not None:
        pytest.skip(f"no emulated nodes: {netlab.available()}")
    with OwnFabrics() as own:
        assert_source_validates(course, LAB7)
    assert no_fabric_left(own), own.stale()


def test_lab07_stubs_fail_every_test_on_reference_data(course, monkeypatch):
    monkeypatch.setenv("MPILAB_NETLAB", "off")  # as on Binder: no root, reference data
    released_failing_every_test(course, LAB7)


FIT_ONE_LINE = '''
def fit_link(n_bytes, t_us, big_bytes):
    n = np.asarray(n_bytes, dtype=float)
    t = np.asarray(t_us, dtype=float)
    slope, intercept = np.polyfit(n, t, 1)
    return float(intercept), float(1 / slope)
'''

LOADS_BOTH_DIRECTIONS = '''
def link_loads(schedule, hosts):
    steps = max(m["step"] for m in schedule)
    out = [0] * steps
    for m in schedule:
        if hosts[m["src"]] != hosts[m["dst"]]:
            out[m["step"] - 1] += m["bytes"]
    return out
'''

PREDICT_IN_US = '''
def predict_ms(schedule, hosts, alpha_us, beta_MBps):
    return sum(alpha_us + load / beta_MBps for load in link_loads(schedule, hosts) if load)
'''

PREDICT_NO_ALPHA = '''
def predict_ms(schedule, hosts, alpha_us, beta_MBps):
    return sum(load / beta_MBps for load in link_loads(schedule, hosts)) / 1e3
'''

ALWAYS_CYCLIC = '''
def best_placement(schedule, nodes):
    p = 1 + max(max(m["src"], m["dst"]) for m in schedule)
    return [r % nodes for r in range(p)]
'''

ENDLESS_SEARCH = '''
def best_placement(schedule, nodes):
    import itertools
    for _ in itertools.count():
        pass
'''

ALL_MESSAGES = '''
def bcast_crossings(hosts, root):
    return len(hosts) - 1, len(set(hosts)) - 1
'''

ONE_PER_RANK = '''
def bcast_crossings(hosts, root):
    p = len(hosts)
    flat = sum(1 for vr in range(1, p) if hosts[(vr + root) % p]
               != hosts[(vr - (1 << (vr.bit_length() - 1)) + root) % p])
    return flat, sum(1 for h in hosts if h != hosts[root])
'''

# patches what the student's kernel holds; the grader's kernel never sees it
HOSTILE = '''
import mpilab.grading.network as _n
import mpilab.network as _net

for _name in dir(_n):
    if _name.startswith("check_"):
        setattr(_n, _name, lambda *a, **k: {})
_n.reference_fit = lambda n, t, big: fit_link(n, t, big)
_n.reference_loads = lambda s, h: link_loads(s, h)
_net.measure = lambda *a, **k: {"ring": {}}
'''


def cases() -> dict:
    ok = solutions(LAB7)
    want = full(LAB7)

    def score(**lost):
        return {g: (0.0 if g in lost else pts) for g, pts in want.items()}

    return {
        "correct": (ok, want),
        "one-line": ({**ok, "fit_link": FIT_ONE_LINE}, score(test_fit_link=0)),
        "both-directions": ({**ok, "link_loads": LOADS_BOTH_DIRECTIONS},
                            score(test_link_loads=0, test_predict=0, test_predict_measured=0,
                                  test_best_placement=0)),
        "microseconds": ({**ok, "predict_ms": PREDICT_IN_US},
                         score(test_predict=0, test_predict_measured=0)),
        # α is a few µs per step of tens of ms: the measurement alone cannot tell, the
        # model's cases can, and so can twice α beside the measured case (one α per step)
        "no-alpha": ({**ok, "predict_ms": PREDICT_NO_ALPHA},
                     score(test_predict=0, test_predict_measured=0)),
        "cyclic": ({**ok, "best_placement": ALWAYS_CYCLIC}, score(test_best_placement=0)),
        "endless": ({**ok, "best_placement": ENDLESS_SEARCH}, score(test_best_placement=0)),
        # tests/hostile_snippets.py: the reference link's numbers in the prediction, the
        # grader's own search as the placement, the grader's own fit; the loads honest
        "cheater": ({**ok, "predict_ms": lab07_predict_hard_coded(),
                     "best_placement": LAB07_BEST_PLACEMENT_LOOKUP,
                     "fit_link": LAB07_FIT_LINK_LOOKUP},
                    score(test_fit_link=0, test_predict=0, test_predict_measured=0,
                          test_best_placement=0)),
        "all-messages": ({**ok, "bcast_crossings": ALL_MESSAGES},
                         score(test_bcast_crossings=0)),
        # one message per rank on another node: wrong wherever a node holds two ranks
        "one-per-rank": ({**ok, "bcast_crossings": ONE_PER_RANK},
                         score(test_bcast_crossings=0)),
        "hostile": ({**ok, "fit_link": FIT_ONE_LINE + HOSTILE,
                     "link_loads": LOADS_BOTH_DIRECTIONS},
                    score(test_fit_link=0, test_link_loads=0, test_predict=0,
                          test_predict_measured=0, test_best_placement=0)),
    }


@pytest.mark.graded_timing
def test_lab07_grades_right_wrong_and_hostile_submissions(course):
    if netlab.available() is not None:
        pytest.skip(f"no emulated nodes: {netlab.available()}")
    subs = cases()
    with OwnFabrics() as own:
        got = grade_all(course, LAB7, {s: answers for s, (answers, _) in subs.items()})
    wrong = {s: (got["scores"][s], want) for s, (_, want) in subs.items()
             if got["scores"][s] != want}
    assert not wrong, f"scores (got, expected): {wrong}"
    nb = graded_notebook(course, LAB7, "correct")
    assert_locked_cells_ran(nb, LAB7)
    said = printed_by(nb, "test_predict_measured")
    assert "within the tolerance" in said and "measured" in said, said
    assert "bucket" in errors_of(graded_notebook(course, LAB7, "one-line"), "test_fit_link")
    both = errors_of(graded_notebook(course, LAB7, "both-directions"), "test_link_loads")
    assert "two directions" in both, both
    assert "µs" in errors_of(graded_notebook(course, LAB7, "microseconds"), "test_predict")
    assert "latency" in errors_of(graded_notebook(course, LAB7, "no-alpha"), "test_predict")
    assert "did not return" in errors_of(graded_notebook(course, LAB7, "endless"),
                                         "test_best_placement")
    every = errors_of(graded_notebook(course, LAB7, "all-messages"), "test_bcast_crossings")
    assert "only those between ranks on different nodes" in every, every
    measured = errors_of(graded_notebook(course, LAB7, "both-directions"),
                         "test_predict_measured")
    assert "measured on this machine" in measured, measured
    said = errors_of(graded_notebook(course, LAB7, "no-alpha"), "test_predict_measured")
    assert "every step with a load pays the latency α" in said, said
    said = errors_of(graded_notebook(course, LAB7, "microseconds"), "test_predict_measured")
    assert "a prediction in µs would add" in said, said
    cheat = graded_notebook(course, LAB7, "cheater")
    said = errors_of(cheat, "test_predict_measured")
    assert "twice α and half β" in said, said
    said = errors_of(cheat, "test_best_placement")
    assert "reference_best" in said and "Refused" in said, said
    said = errors_of(cheat, "test_fit_link")
    assert "reference_fit" in said and "Refused" in said, said
    assert not leftover_processes(course)
    assert no_fabric_left(own), own.stale()

