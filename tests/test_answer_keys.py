"""The labs' answer keys (mpilab.grading.keys): the course's package holds no answer to lab
07's graded functions; the instructors' key answers where it is; without it (the
students' edition) the visible test cells' cases are checked from the answers written for
them, a wrong answer still gets its hint, and any other case is ungradable there, not
failed.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, needs_mpi

from mpilab import network
from mpilab.autograder.failures import CheckFailed, Ungradable
from mpilab.grading import hierarchy, keys
from mpilab.grading import network as N

pytestmark = needs_mpi

LAB = "lab07-across-the-link"
SOURCE = ROOT / "labs" / LAB / f"{LAB}.ipynb"
B = network.RING_BLOCK


def solutions() -> dict:
    """The lab's solution functions, from its source notebook."""
    cells = json.loads(SOURCE.read_text())["cells"]
    ns: dict = {}
    exec(keys._imports("".join(cells[1]["source"])), ns)
    for c in cells:
        m = c.get("metadata", {}).get("nbgrader", {})
        if c["cell_type"] == "code" and m.get("solution") and not m.get("grade"):
            exec("".join(c["source"]), ns)
    return ns


@pytest.fixture(scope="module")
def ok():
    return solutions()


@pytest.fixture
def students_edition(monkeypatch):
    """No autograder/ folder: as in the students' edition."""
    monkeypatch.setattr(keys, "keys_dir", lambda: None)
    assert keys.key(LAB) is None


def test_the_package_holds_no_answer_of_lab07():
    """No distinctive line of the key's code (24 characters or more, docstrings aside) is
    in any file of the package; the package's reference_* only call the key."""
    import ast

    path = ROOT / keys.KEYS / f"{LAB}.py"
    tree = ast.parse(path.read_text())
    doc_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Module)) and ast.get_docstring(node):
            first = node.body[0]
            doc_lines |= set(range(first.lineno, first.end_lineno + 1))
    code = {ln.strip() for i, ln in enumerate(path.read_text().splitlines(), 1)
            if i not in doc_lines and len(ln.strip()) >= 24
            and not ln.strip().startswith(("def ", "from ", "import ", "#"))}
    assert len(code) >= 10, code
    for module in (ROOT / "mpilab").rglob("*.py"):
        have = {ln.strip() for ln in module.read_text().splitlines()}
        assert not code & have, (module, sorted(code & have))
    assert keys.key(LAB).reference_best is not N.reference_best


def test_the_written_answers_are_the_keys_for_the_visible_cases_only():
    kept = json.loads(keys.expected_path(LAB).read_text())["answers"]
    assert kept == keys.collect(LAB, SOURCE)  # `make expected` is up to date
    kinds = {json.loads(k)[0] for k in kept}
    assert kinds == {"loads", "placements", "crossings"}, kinds
    # the hidden tests' cases are not there (Bruck, 6 and 8 ranks, other roots)
    cases = [json.loads(k)[1] for k in kept]
    assert not [c for c in cases if "bruck" in c or 6 in c or 8 in c], cases
    crossings = sorted(json.dumps(json.loads(k)[1]) for k in kept
                       if json.loads(k)[0] == "crossings")
    assert crossings == sorted(json.dumps(c) for c in (
        [[0, 0, 1, 1], 0], [[0, 1, 0, 1], 0], [[0, 0, 0, 0, 1, 1, 1, 1], 0]))


def test_with_the_key_every_case_is_answered(ok):
    assert keys.key(LAB) is not None
    N.check_link_loads(ok["link_loads"], [("bruck", 6, 65536, [0, 0, 1, 1, 2, 2])])
    N.check_best_placement(ok["best_placement"], [("bruck", 6, 65536, 3)])
    hierarchy.check_bcast_crossings(ok["bcast_crossings"], [([0, 1, 2, 0, 1, 2], 2)])
    assert N.reference_best(N.traced("ring", 4, B), 2)[0] == 3 * B


def test_without_the_key_the_visible_cases_are_checked(students_edition, ok):
    N.check_link_loads(ok["link_loads"], [("ring", 4, B, "slot"), ("ring", 4, B, "node")])
    N.check_predict(ok["predict_ms"], [("ring", 4, B, "slot", 50.0, 12.0)])
    assert N.check_best_placement(ok["best_placement"], [("ring", 4, B, 2)]) == [[0, 0, 1, 1]]
    hierarchy.check_bcast_crossings(ok["bcast_crossings"], [([0, 1, 0, 1], 0)])

    def total(schedule, hosts):  # both directions added up: the hint still names it
        out = [0] * max(m["step"] for m in schedule)
        for m in schedule:
            if hosts[m["src"]] != hosts[m["dst"]]:
                out[m["step"] - 1] += m["bytes"]
        return out

    with pytest.raises(CheckFailed, match="every crossing byte of the step added up"):
        N.check_link_loads(total, [("ring", 4, B, "node")])
    with pytest.raises(CheckFailed, match="That is µs"):
        N.check_predict(lambda s, h, a, b: 1e3 * ok["predict_ms"](s, h, a, b),
                        [("ring", 4, B, "slot", 50.0, 12.0)])
    # a valid placement that is not the best, in other node names: costed, and refused
    with pytest.raises(CheckFailed, match="puts 1,572,864 B"):
        N.check_best_placement(lambda s, k: [1, 0, 1, 0], [("ring", 4, B, 2)])


def test_without_the_key_another_case_is_ungradable_not_failed(students_edition, ok):
    with pytest.raises(Ungradable, match="checked only by the grader"):
        N.check_link_loads(ok["link_loads"], [("bruck", 4, B, "slot")])
    with pytest.raises(Ungradable, match="autograder/keys/lab07-across-the-link.py"):
        hierarchy.check_bcast_crossings(ok["bcast_crossings"], [([0, 0, 1, 1], 3)])
    with pytest.raises(Ungradable, match=r"reference_best\(\.\.\.\)"):
        N.reference_best(N.traced("ring", 4, B), 2)
