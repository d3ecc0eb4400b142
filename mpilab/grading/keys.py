"""The labs' answer keys: kept on the instructors' side, asked for by the checks.

A check that compares a student's function with the course's own answer (lab 07's link
loads, its best placement, a bcast's crossings) does not hold that answer: it asks
:func:`answer` for it, naming the lab, the kind of answer and the case.

- **The instructors' course** (a checkout with ``autograder/keys/<lab>.py``, which is
  where the grader runs): the key computes it. The key is a Python file of the lab's
  reference functions; the students' edition (``make student-edition``) leaves
  ``autograder/`` out, so no student receives it.
- **The students' edition** (no ``autograder/``): the answers of the cases the released
  notebook's visible test cells check are read from ``reference/expected/<lab>.json``,
  written from the key by :func:`write_expected` (``make expected``); the hidden tests'
  cases are not in it, and any other case is :class:`~mpilab.grading.Ungradable` there,
  with a message that says only the grader checks it.

An answer is what the key returns as JSON gives it back (tuples become lists), the same in
both places. :func:`collect` finds the cases to write by running the visible part of each
keyed test cell of the lab's source notebook with the lab's solutions, the key answering
and every answer noted.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ..autograder.failures import Ungradable
from ..autograder.failures import fail as _fail

__all__ = ["KEYS", "EXPECTED", "KEYED", "keys_dir", "key", "call", "answer",
           "recording", "collect", "write_expected", "expected_path", "main"]

#: The keys' folder, relative to the course root: the instructors' side only.
KEYS = Path("autograder") / "keys"
#: The visible cases' answers, relative to the course root: what the students' edition holds.
EXPECTED = Path("reference") / "expected"
#: Per lab, the checks whose test cells need its key (the cells :func:`collect` runs).
KEYED = {
    "lab07-across-the-link": ("check_link_loads", "check_predict", "check_best_placement",
                              "check_bcast_crossings"),
}

_loaded: dict[str, ModuleType] = {}
_noted: dict[str, dict[str, Any]] | None = None


def keys_dir() -> Path | None:
    """The folder of the answer keys, or None where there is none (the students' edition).

    Returns
    -------
    pathlib.Path or None
        ``<course root>/autograder/keys`` when it exists.
    """
    from mpilab import paths

    try:
        folder = paths.course_root() / KEYS
    except paths.CourseNotFound:
        return None
    return folder if folder.is_dir() else None


def key(lab: str) -> ModuleType | None:
    """Lab `lab`'s answer key, loaded once, or None where it is not (the students' edition).

    Parameters
    ----------
    lab : str
        The lab ("lab07-across-the-link").

    Returns
    -------
    module or None
        ``autograder/keys/<lab>.py``, imported as ``mpilab_keys.<lab>``.
    """
    folder = keys_dir()
    path = folder / f"{lab}.py" if folder is not None else None
    if path is None or not path.is_file():
        return None
    name = str(path)
    if name not in _loaded:
        spec = importlib.util.spec_from_file_location(
            "mpilab_keys." + lab.replace("-", "_"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[name] = module
    return _loaded[name]


def _without_key(lab: str, what: str) -> None:
    __tracebackhide__ = True
    _fail(Ungradable(
        f"{what} is checked only by the grader: the course's answer to it is kept with the "
        f"instructors (autograder/keys/{lab}.py), and this edition of the course holds the "
        "answers of the notebook's visible test cases only. Check your function on those."))


def call(lab: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """The lab's answer key's function `name` on these arguments (a checks module's
    ``reference_*`` calls it); Ungradable where the key is not (the students' edition).

    Parameters
    ----------
    lab : str
        The lab.
    name : str
        The function of ``autograder/keys/<lab>.py``.
    *args, **kwargs
        Its arguments.

    Returns
    -------
    object
        What the key's function returned.

    Raises
    ------
    mpilab.grading.Ungradable
        Where there is no key for the lab.
    """
    __tracebackhide__ = True
    keys = key(lab)
    if keys is None:
        _without_key(lab, f"{name}(...)")
    return getattr(keys, name)(*args, **kwargs)


def _case_key(kind: str, case: Iterable) -> str:
    return json.dumps([kind, list(case)], sort_keys=True)


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def expected_path(lab: str) -> Path:
    """Where lab `lab`'s visible cases' answers are kept (``reference/expected/<lab>.json``).

    Parameters
    ----------
    lab : str
        The lab.

    Returns
    -------
    pathlib.Path
        The file, under the course root.
    """
    from mpilab import paths

    return paths.course_root() / EXPECTED / f"{lab}.json"


def _expected(lab: str) -> dict[str, Any]:
    path = expected_path(lab)
    return json.loads(path.read_text())["answers"] if path.is_file() else {}


def answer(lab: str, kind: str, case: Iterable, compute: Callable[[ModuleType], Any],
           what: str) -> Any:
    """The course's answer of kind `kind` to `case`: from the lab's key where it is, else
    from the visible cases' answers; Ungradable for any other case there.

    Parameters
    ----------
    lab : str
        The lab.
    kind : str
        What is answered ("loads", "best", "crossings"): the answers' namespace.
    case : iterable
        The case, as JSON can write it (lists, numbers, strings).
    compute : callable
        ``compute(key) -> answer``, given the key's module.
    what : str
        The case in the student's words, for the message where it cannot be answered.

    Returns
    -------
    object
        The answer, as JSON gives it back (tuples as lists).

    Raises
    ------
    mpilab.grading.Ungradable
        Where there is no key and the case is not one of the visible test cells'.
    """
    __tracebackhide__ = True
    keys = key(lab)
    if keys is not None:
        value = _as_json(compute(keys))
        if _noted is not None:
            _noted.setdefault(lab, {})[_case_key(kind, case)] = value
        return value
    answers = _expected(lab)
    found = answers.get(_case_key(kind, case), answers)
    if found is answers:
        _without_key(lab, what)
    return found


@contextlib.contextmanager
def recording() -> Iterator[dict[str, dict[str, Any]]]:
    """Note every answer a key gives meanwhile: ``{lab: {case key: answer}}``.

    Yields
    ------
    dict
        The answers noted so far, per lab.
    """
    global _noted
    before, _noted = _noted, {}
    try:
        yield _noted
    finally:
        _noted = before


def _visible(cell: str) -> str:
    return cell.split("### BEGIN HIDDEN TESTS")[0]


def _imports(cell: str) -> str:
    tree = ast.parse(cell)
    return "\n".join(ast.get_source_segment(cell, node) for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


def collect(lab: str, source: Path) -> dict[str, Any]:
    """The answers the visible test cells of lab `lab`'s source notebook ask its key for.

    Runs, in one namespace, the imports of the notebook's first code cell, every solution
    cell and the visible part (before ``### BEGIN HIDDEN TESTS``) of each test cell that
    calls one of :data:`KEYED`'s checks, noting the key's answers.

    Parameters
    ----------
    lab : str
        The lab.
    source : pathlib.Path
        Its source notebook (solutions and hidden tests).

    Returns
    -------
    dict
        ``{case key: answer}``.

    Raises
    ------
    RuntimeError
        Where the lab has no key here.
    """
    if key(lab) is None:
        raise RuntimeError(f"no answer key for {lab} here ({KEYS / (lab + '.py')})")
    cells = json.loads(source.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in code]
    text = ["".join(c["source"]) for c in code]
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(_imports(text[0]), f"<{lab} imports>", "exec"), ns)
    for src, m in zip(text, meta, strict=True):
        if m.get("solution") and not m.get("grade"):
            exec(compile(src, f"<{lab} {m.get('grade_id')}>", "exec"), ns)
    with recording() as noted, contextlib.redirect_stdout(io.StringIO()):
        for src, m in zip(text, meta, strict=True):
            if m.get("grade") and any(f".{c}(" in src for c in KEYED[lab]):
                exec(compile(_visible(src), f"<{lab} {m.get('grade_id')}>", "exec"), ns)
    return dict(sorted(noted.get(lab, {}).items()))


def write_expected(lab: str, source: Path) -> Path:
    """Write the visible cases' answers of lab `lab` (:func:`collect`) where the students'
    edition reads them (:func:`expected_path`).

    Parameters
    ----------
    lab : str
        The lab.
    source : pathlib.Path
        Its source notebook.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    path = expected_path(lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"lab": lab,
           "note": ("The answers of the cases the lab's visible test cells check, written "
                    "from the instructors' answer key (make expected); the hidden tests' "
                    "cases are not here."),
           "answers": collect(lab, source)}
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """``make expected [LABS=...]``: write the visible cases' answers of each lab (every
    lab of :data:`KEYED` by default) from its key. (Not ``python -m``: run as
    ``__main__``, this module would not be the one the checks import.)

    Parameters
    ----------
    argv : list of str, optional
        The labs; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 once every file is written.
    """
    import sys

    from mpilab import paths

    labs = (sys.argv[1:] if argv is None else argv) or list(KEYED)
    for lab in labs:
        source = paths.course_root() / "labs" / lab / f"{lab}.ipynb"
        print(f"wrote {write_expected(lab, source)}")
    return 0
