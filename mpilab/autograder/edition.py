"""The students' edition of the course: what a student may see, written from this
repository, which is the instructors' edition.

This repository holds the labs' nbgrader *source* notebooks (solutions between
``### BEGIN SOLUTION`` and ``### END SOLUTION``, hidden tests between ``### BEGIN HIDDEN
TESTS`` and ``### END HIDDEN TESTS``), the tests (correct and hostile submissions), the
nbgrader course (``autograder/``, with the fallback data of the hidden cases). None of it
may reach a student. ``make student-edition DEST=dir`` (``python -m
mpilab.autograder.edition DEST``) writes the course a student may see:

- the lectures, the package, the kernels' sources, the reference data, ``binder/`` and
  what ``make lab`` needs to set up (``scripts/setup.sh``, ``setup.py``, the pins, the
  students' JupyterLab settings, ``jupytext.toml``);
- every lab as nbgrader *releases* it (``generate_assignment``: solutions replaced by
  stubs, hidden tests removed, the students' header added);
- a README for students (``docs/student-edition.md``).

Then it scans what it wrote (:func:`leaks`) and fails if any file holds a solution, a
hidden test, or a hidden case of lab 06's Part F with its simulated answer. The edition
is what Binder builds and what an instructor publishes; the instructors' repository stays
private (autograder/README.md says how).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import course

__all__ = ["INCLUDE", "SKIP", "KNOWN", "Secret", "secrets", "hidden_cases", "leaks", "build",
           "main"]

#: What a student gets besides the released labs, relative to the repository.
INCLUDE = ("lectures", "mpilab", "kernels", "reference", "binder", "jupyter/student",
           "scripts/setup.sh", "setup.py", "pyproject.toml", "constraints.txt",
           "environment.yml", "Makefile", ".gitignore", "jupytext.toml")
#: Never copied: builds, caches, a grader's kept measurements.
SKIP = ("__pycache__", ".ipynb_checkpoints", "*.so", "*.pyc", "_bin", "*.measured.json",
        "*.egg-info")
README = Path("docs") / "student-edition.md"
#: Found on purpose: four graded models that the lab's own text states in full (lab 01
#: Part E's t0 + depth · cost, lab 03 Part D's t(empty epoch) + n / β, lab 04 Part D's
#: t(tiny push) + n / β_copy, lab 07 Part A's recipe: the smallest message's time, 1 /
#: slope of np.polyfit over the messages of at least big_bytes, ValueError below two).
#: The grading modules hold that formula as
#: the reference the students' own check cells compare with, and it is the solution's
#: line; what these parts grade is the prediction against a measurement. Kept on purpose:
#: copying one is writing what the lab's text says, and a graded answer that *calls* one
#: is refused by name on the grader's ranks (:mod:`mpilab.autograder.watch`; tests:
#: test_student_edition, and labs 01, 04 and 07's cheaters end to end). :func:`build`
#: lists them; any other find fails it.
KNOWN = (
    "mpilab/grading/coarrays.py: lab04-coarrays push_us: solution",
    "mpilab/grading/network_model.py: lab07-across-the-link fit_link: solution",
    "mpilab/grading/onesided_model.py: lab03-one-sided epoch_us: solution",
    "mpilab/grading/pingpong.py: lab01-pingpong predict_behind: solution",
)

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS",
            "### END HIDDEN TESTS")
_BLOCK = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
#: A line of a secret counts only when it says something: at least this many characters
#: once blanks are squeezed (``return x`` or ``comm.Barrier()`` are in every lecture).
DISTINCT = 24


class Secret:
    """One thing no student file may hold: a solution block or a hidden-test block of a
    lab's source notebook (as its distinctive lines), or a hidden case of a lab."""

    def __init__(self, what: str, lines: Iterable[str]):
        self.what = what
        self.lines = sorted({ln for ln in map(_squeeze, lines) if len(ln) >= DISTINCT})

    def found_in(self, have: set[str]) -> bool:
        """Most of the secret's distinctive lines (all of one or two) are in `have`.

        Parameters
        ----------
        have : set of str
            The lines of a file, blanks squeezed (one space between words).

        Returns
        -------
        bool
            True when all of the secret's one or two lines, or at least 60 % of three or
            more, are in `have`; False for a secret without distinctive lines.
        """
        if not self.lines:
            return False
        hits = sum(ln in have for ln in self.lines)
        return hits == len(self.lines) if len(self.lines) <= 2 else hits >= 0.6 * len(self.lines)

    def __repr__(self) -> str:
        return f"Secret({self.what!r}, {len(self.lines)} lines)"


def _squeeze(line: str) -> str:
    return " ".join(line.split())


def secrets(repo: Path = course.REPO, labs: Sequence[str] = course.LABS,
            released: Path | None = None) -> list[Secret]:
    """Every solution and hidden-test block of the labs' source notebooks.

    With `released` (a folder holding ``labs/<lab>/<lab>.ipynb`` as nbgrader released
    them), the lines a lab hands out anyway (a broken exchange to fix is most of its fix)
    are not secret: what is left is what the student has to write.

    Parameters
    ----------
    repo : Path, optional
        The instructors' repository (default: the course's, ``course.REPO``).
    labs : sequence of str, optional
        The labs to read (default: all, ``course.LABS``).
    released : Path, optional
        A folder with the released labs, whose lines are not secret (default: none).

    Returns
    -------
    list of Secret
        One per block with at least one distinctive line (``DISTINCT`` characters or
        more), named ``"LAB GRADE_ID: solution"`` or ``"... hidden tests"``.
    """
    import nbformat

    out = []
    for lab in labs:
        nb = nbformat.read(repo / "labs" / lab / f"{lab}.ipynb", 4)
        given = set()
        if released is not None and (released / "labs" / lab / f"{lab}.ipynb").exists():
            given = _text_lines(released / "labs" / lab / f"{lab}.ipynb") or set()
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id", "?")
            for kind, body in _BLOCK.findall(cell.source):
                lines = [ln for ln in body.splitlines() if _squeeze(ln) not in given]
                secret = Secret(f"{lab} {gid}: {kind.lower()}", lines)
                if secret.lines:
                    out.append(secret)
    return out


def hidden_cases(repo: Path = course.REPO) -> dict[tuple[int, str], tuple[int, ...]]:
    """Lab 06 Part F's hidden cases, ``{(ranks, placement): sizes}``, read from the hidden
    tests of its source notebook: the only place they are written.

    Parameters
    ----------
    repo : Path, optional
        The instructors' repository (default: the course's, ``course.REPO``).

    Returns
    -------
    dict of (int, str) to tuple of int
        The message sizes (bytes) of each hidden case, by its ranks and placement.

    Raises
    ------
    ValueError
        When the hidden test of ``choose_allgather`` does not name exactly one set of
        cases.
    """
    import nbformat

    lab = "lab06-allgather"
    nb = nbformat.read(repo / "labs" / lab / f"{lab}.ipynb", 4)
    src = next(c.source for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade_id") == "test_choose_allgather")
    hidden = src.split("### BEGIN HIDDEN TESTS", 1)[1]
    found = re.findall(r"choose_allgather,\s*(\{[^}]*\})", hidden)
    if len(found) != 1:
        raise ValueError(f"lab 06's hidden test of choose_allgather names {len(found)} sets "
                         "of cases, not one")
    return {k: tuple(v) for k, v in ast.literal_eval(found[0]).items()}


def _text_lines(path: Path) -> set[str] | None:
    """The squeezed lines of a text file (a notebook's cells and outputs, one by one);
    None for a binary file."""
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    if path.suffix == ".ipynb":
        try:
            nb = json.loads(text)
            parts = []
            for cell in nb.get("cells", []):
                parts.append("".join(cell.get("source", "")))
                for out in cell.get("outputs", []):
                    parts.append("".join(out.get("text", "")))
                    parts += ["".join(v) if isinstance(v, list) else str(v)
                              for v in out.get("data", {}).values()]
            text = "\n".join(parts) + "\n" + text
        except (ValueError, AttributeError, TypeError):
            pass
    return {_squeeze(ln) for ln in text.splitlines()}


def _records(doc) -> Iterable[dict]:
    if isinstance(doc, dict):
        if {"ranks", "size_bytes"} <= doc.keys():
            yield doc
        for v in doc.values():
            yield from _records(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _records(v)


def leaks(tree: Path, repo: Path = course.REPO,
          labs: Sequence[str] = course.LABS) -> list[str]:
    """What in `tree` a student must not see, one line per finding (empty: nothing).

    Looks at every file: nbgrader's solution and hidden-test markers; most of the
    distinctive lines of any solution or hidden-test block of the labs' sources; a
    simulated record of one of lab 06's hidden cases (its ranks and size, at any placement)
    in a JSON file; the nbgrader course folder (``autograder/``) or the tests.

    Parameters
    ----------
    tree : Path
        The folder to scan (an edition, or a students' checkout).
    repo : Path, optional
        The instructors' repository the secrets are read from (default: the course's,
        ``course.REPO``).
    labs : sequence of str, optional
        The labs whose secrets to look for (default: all, ``course.LABS``).

    Returns
    -------
    list of str
        One line per finding, ``"PATH: what"`` (path relative to `tree`); empty when
        nothing leaks.
    """
    tree = Path(tree)
    found = []
    secret_list = secrets(repo, labs, released=tree)
    # at any placement: a hidden case's ranks and size are its answer's key
    hidden = {(p, n) for (p, _), sizes in hidden_cases(repo).items()
              for n in sizes} if "lab06-allgather" in labs else set()
    for top in ("autograder", "tests", ".ci"):
        if (tree / top).exists():
            found.append(f"{top}/: the instructors' side")
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(tree)
        if ".git" in rel.parts:
            continue
        lines = _text_lines(path)
        if lines is None:
            continue
        joined = "\n".join(lines)
        for marker in _MARKERS if path.suffix != ".py" else ():  # code may name them
            if marker in joined:
                found.append(f"{rel}: nbgrader's marker {marker!r}")
        for secret in secret_list:
            if secret.found_in(lines):
                found.append(f"{rel}: {secret.what}")
        if hidden and path.suffix == ".json":
            try:
                doc = json.loads(path.read_text())
            except ValueError:
                continue
            cases = sorted({(r["ranks"], r.get("map_by"), r["size_bytes"]) for r in _records(doc)
                            if (r["ranks"], r["size_bytes"]) in hidden})
            if cases:
                found.append(f"{rel}: lab 06's hidden cases {cases}")
    return found


def _ignore(folder: str, names: list[str]) -> set[str]:
    return set(shutil.ignore_patterns(*SKIP)(folder, names))


def build(dest: Path, repo: Path = course.REPO, labs: Sequence[str] = course.LABS,
          force: bool = False) -> Path:
    """Write the students' edition into `dest` (which must not exist, or be empty, unless
    `force`), then scan it: :class:`RuntimeError` naming every leak found.

    Parameters
    ----------
    dest : Path
        The folder to write, outside `repo`.
    repo : Path, optional
        The instructors' repository (default: the course's, ``course.REPO``).
    labs : sequence of str, optional
        The labs to release into the edition (default: all, ``course.LABS``).
    force : bool, optional
        Replace `dest` when it is not empty (default False).

    Returns
    -------
    Path
        `dest`, resolved.

    Raises
    ------
    ValueError
        When `dest` is `repo` or inside it.
    FileExistsError
        When `dest` is not empty and `force` is False.
    RuntimeError
        When the scan finds a leak other than the ``KNOWN`` ones (the edition is left
        in `dest` for a look).
    """
    dest = Path(dest).resolve()
    repo = Path(repo).resolve()
    if dest == repo or repo in dest.parents:
        raise ValueError(f"write the students' edition outside the repository, not {dest}")
    if dest.exists() and any(dest.iterdir()):
        if not force:
            raise FileExistsError(f"{dest} is not empty (pass --force to replace it)")
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in INCLUDE:
        src = repo / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_ignore)
        elif src.exists():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    shutil.copy2(repo / README, dest / "README.md")
    with tempfile.TemporaryDirectory(prefix="mpilab-edition-") as tmp:
        root = course.make_course(Path(tmp), labs, repo)
        for lab in labs:
            shutil.copytree(root / "autograder" / "release" / lab, dest / "labs" / lab,
                            ignore=_ignore)
    found = [f for f in leaks(dest, repo, labs) if f not in KNOWN]
    if found:
        raise RuntimeError("the students' edition in " + str(dest) + " holds what students "
                           "must not see:\n  " + "\n  ".join(found))
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    """The command line, ``python -m mpilab.autograder.edition DEST``: :func:`build`, or
    with ``--scan-only`` only :func:`leaks`.

    Parameters
    ----------
    argv : sequence of str, optional
        ``DEST [--force] [--scan-only]`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 when the edition was written (or the scan found nothing), 1
        when not.
    """
    ap = argparse.ArgumentParser(prog="python -m mpilab.autograder.edition",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", help="folder to write (outside the repository)")
    ap.add_argument("--force", action="store_true", help="replace a folder that is not empty")
    ap.add_argument("--scan-only", action="store_true",
                    help="only scan DEST (an edition or a students' checkout) for leaks")
    args = ap.parse_args(argv)
    if args.scan_only:
        found = leaks(Path(args.dest))
        print("\n".join(found) if found else f"{args.dest}: nothing a student must not see")
        return 1 if found else 0
    try:
        out = build(Path(args.dest), force=args.force)
    except (RuntimeError, FileExistsError, ValueError) as exc:
        print(f"student-edition: {exc}", file=sys.stderr)
        return 1
    print(f"student-edition: wrote {out} (labs released by nbgrader; scanned: no solution, "
          "hidden test or hidden case; found on purpose, the lab's text states these models):\n  "
          + "\n  ".join(KNOWN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
