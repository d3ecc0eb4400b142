"""The students' edition (``make student-edition DEST=dir``): the course a student may see,
written from this repository (the instructors' edition), with no solution, hidden test or
hidden case in it.

Built once for the module (nbgrader releases every lab); then: it holds what a student
needs (lectures, released labs with the students' header, reference data, the package and
everything ``make lab`` builds it from, binder/), and nothing of the instructors' side;
the scan finds nothing beyond the known list, and finds what is planted (a solution in a
Python file, a hidden test in a lecture, a hidden case of lab 06 in a JSON file, nbgrader's
marker in a notebook, an autograder/ folder); repo2docker reads the edition's binder/ as
the repository's; lab 06's hidden cases grade from the instructors' side only, and a
course without it says where they are.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import repo2docker_probe
from conftest import ROOT

from mpilab.autograder import course, edition
from mpilab.grading import simulated


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return edition.build(tmp_path_factory.mktemp("edition") / "course")


def _tracked(*paths: str) -> set[str]:
    out = subprocess.run(["git", "ls-files", *paths], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    return set(out.split())


def test_the_edition_holds_the_course_a_student_needs(built):
    for folder in ("lectures", "reference", "mpilab", "kernels", "binder", "jupyter/student"):
        missing = {f for f in _tracked(folder) if not (built / f).is_file()}
        assert not missing, (folder, sorted(missing)[:10])
    for name in ("scripts/setup.sh", "setup.py", "pyproject.toml", "constraints.txt",
                 "environment.yml", "Makefile", "jupytext.toml"):
        assert (built / name).read_bytes() == (ROOT / name).read_bytes(), name
    assert (built / "README.md").read_text() == (ROOT / edition.README).read_text()
    assert "students' edition" in (built / "README.md").read_text()
    import nbformat

    for lab in course.LABS:
        nb = nbformat.read(built / "labs" / lab / f"{lab}.ipynb", 4)
        text = "\n".join(c.source for c in nb.cells)
        assert "raise NotImplementedError()" in text, lab  # the stubs
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, lab
        assert nb.cells[0].id == "course-header", lab  # autograder/header.ipynb
    assert (built / "labs" / "lab01-pingpong" / "pingpong_measured.json").is_file()


def test_nothing_of_the_instructors_side_is_in_it(built):
    for name in ("autograder", "tests", ".ci", "docs", "ARCHITECTURE.md", "jupyter/instructor",
                 "scripts/test-mpi.sh", "scripts/stock-root.sh"):
        assert not (built / name).exists(), name
    assert not list(built.rglob("*.so")) and not list(built.rglob("__pycache__"))
    assert not (built / simulated.HIDDEN_REFERENCE).exists()


def test_the_scan_finds_only_the_known_list(built):
    """The known list: four graded models the lab's text states in full, whose reference
    the students' own check cells use."""
    assert edition.leaks(built) == list(edition.KNOWN)


#: Each known find's reference function, as a student's graded answer would call it.
KNOWN_REFERENCES = {
    "mpilab/grading/coarrays.py: lab04-coarrays push_us: solution":
        ("mpilab.grading.coarrays", "reference_push_us", (1 << 20, 5.0, 2000.0)),
    "mpilab/grading/network_model.py: lab07-across-the-link fit_link: solution":
        ("mpilab.grading.network", "reference_fit",
         ([8, 131072, 1 << 20], [30.0, 1200.0, 9000.0], 131072)),
    "mpilab/grading/onesided_model.py: lab03-one-sided epoch_us: solution":
        ("mpilab.grading.onesided_model", "reference_epoch_us", (1 << 20, 20.0, 3000.0)),
    "mpilab/grading/pingpong.py: lab01-pingpong predict_behind: solution":
        ("mpilab.grading.pingpong", "reference_behind_us", (4096, 0.5, 30.0)),
}


def test_a_known_find_called_as_an_answer_is_refused():
    """Why the known finds may stay in the students' edition: copying one is writing what
    the lab's text says; *calling* one from a graded answer is refused by the watch on the
    grader's ranks, by name (labs 01, 04 and 07 also grade such a cheat end to end)."""
    import cloudpickle

    from mpilab.autograder.watch import Refused, watched

    assert set(KNOWN_REFERENCES) == set(edition.KNOWN)  # a new find needs its line here
    for find, (module, name, args) in KNOWN_REFERENCES.items():
        cell = (f"def answer(*args):\n    from {module} import {name}\n"
                f"    return {name}(*args)\n")
        ns: dict = {"__name__": "__main__"}
        exec(compile(cell, "/tmp/ipykernel_1/cell.py", "exec"), ns)
        with pytest.raises(Refused) as info:
            watched(cloudpickle.loads(cloudpickle.dumps(ns["answer"])))(*args)
        assert name in str(info.value) and "Refused" in str(info.value), (find, info.value)


@pytest.fixture
def planted(built, tmp_path):
    tree = tmp_path / "course"
    shutil.copytree(built, tree, symlinks=True)
    return tree


def test_a_planted_solution_is_found(planted):
    answer = course.solutions("lab00-mpi-basics")
    gid, code = max(answer.items(), key=lambda kv: len(kv[1]))
    (planted / "mpilab" / "notes.py").write_text(f"# kept for later\n{code}\n")
    found = edition.leaks(planted)
    assert f"mpilab/notes.py: lab00-mpi-basics {gid}: solution" in found, found


def test_a_planted_hidden_test_is_found(planted):
    import nbformat

    nb = nbformat.read(ROOT / "labs" / "lab02-halo" / "lab02-halo.ipynb", 4)
    cell = next(c for c in nb.cells if "### BEGIN HIDDEN TESTS" in c.source)
    hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    gid = cell.metadata["nbgrader"]["grade_id"]
    lecture = planted / "lectures" / "02-halo-exchange.md"
    lecture.write_text(lecture.read_text() + "\n```python\n" + hidden + "\n```\n")
    found = edition.leaks(planted)
    assert f"lectures/02-halo-exchange.md: lab02-halo {gid}: hidden tests" in found, found


def test_a_planted_hidden_case_is_found(planted):
    (p, placement), sizes = next(iter(edition.hidden_cases().items()))
    rec = {"ranks": p, "map_by": simulated.PLACEMENTS[placement], "size_bytes": sizes[0],
           "impl": "mpilab:bruck", "t_us_median": 1.0}
    (planted / "reference" / "simulated" / "more.json").write_text(
        json.dumps({"meta": {}, "records": [rec]}))
    found = edition.leaks(planted)
    assert (f"reference/simulated/more.json: lab 06's hidden cases "
            f"[({p}, '{simulated.PLACEMENTS[placement]}', {sizes[0]})]") in found, found


def test_a_marker_and_the_gradebook_folder_are_found(planted):
    lab = planted / "labs" / "lab00-mpi-basics" / "lab00-mpi-basics.ipynb"
    doc = json.loads(lab.read_text())
    doc["cells"][-1]["source"] = ["### BEGIN HIDDEN TESTS\n", "assert True\n",
                                  "### END HIDDEN TESTS\n"]
    lab.write_text(json.dumps(doc))
    (planted / "autograder").mkdir()
    (planted / "autograder" / "gradebook.db").write_bytes(b"SQLite format 3\x00")
    found = edition.leaks(planted)
    assert ("labs/lab00-mpi-basics/lab00-mpi-basics.ipynb: nbgrader's marker "
            "'### BEGIN HIDDEN TESTS'") in found, found
    assert "autograder/: the instructors' side" in found, found


def test_build_refuses_the_repository_and_a_full_folder(built, tmp_path):
    with pytest.raises(ValueError, match="outside the repository"):
        edition.build(ROOT / "build" / "edition")
    with pytest.raises(FileExistsError, match="not empty"):
        edition.build(built)


def test_repo2docker_reads_the_editions_binder_as_the_repositorys(built, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "binder", repo / "binder")
    shutil.copy(ROOT / "environment.yml", repo / "environment.yml")
    want = repo2docker_probe.read(repo)
    got = repo2docker_probe.read(built)
    assert got == want


def test_lab06_hidden_cases_grade_from_the_instructors_side_only(built, monkeypatch):
    """Without SimGrid the check reads saved simulations: in the students' edition only
    the visible ones are there, and a hidden case says where its data lives."""
    monkeypatch.setattr(simulated.sim, "available", lambda: (False, "no SimGrid (test)"))
    monkeypatch.setenv("MPILAB_COURSE", str(built))
    visible = simulated.simulated(64, simulated.VISIBLE[(64, "block")], "block")[0]
    assert visible
    (p, placement), sizes = next(iter(edition.hidden_cases().items()))
    with pytest.raises(RuntimeError, match="autograder/reference/lab06-allgather-hidden.json"):
        simulated.simulated(p, sizes, placement)
    monkeypatch.setenv("MPILAB_COURSE", str(ROOT))  # the instructors' checkout
    assert set(simulated.simulated(p, sizes, placement)[0]) == set(sizes)
