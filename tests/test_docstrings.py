"""The public API a notebook, an instructor or a lab's checks call is documented in numpydoc.

For every public function and method of the modules below (every name without a leading
underscore, in ``__all__`` or not: a lab may call what a module's ``__all__`` forgot;
methods of public classes; not properties, not re-exports): a docstring,
a ``Parameters`` section naming each parameter (``self`` and ``cls`` aside), and a
``Returns`` (or ``Yields``) section where the function returns a value. What the sections
say is for a reader; this test checks only that they are there and name every parameter.

numpydoc's own ``numpydoc.validate`` does more (types, summary style), but it brings
Sphinx into every set-up the course makes (five in CI) for a check this size.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The modules whose public functions are API: what lectures, labs, instructors and lab
#: checks call (packages: every module in them).
DOCUMENTED = [
    "mpilab.cluster", "mpilab.timing", "mpilab.pingpong", "mpilab.models", "mpilab.tracing",
    "mpilab.collectives", "mpilab.halo", "mpilab.tuning", "mpilab.sim", "mpilab.netlab",
    "mpilab.runtime", "mpilab.jobs", "mpilab.notebooks", "mpilab.coarrays",
    "mpilab.buffers", "mpilab.paths", "mpilab.papers", "mpilab.plots",
    "mpilab.grading", "mpilab.autograder", "mpilab.bench.grading_errors",
    "mpilab.bench.classroom", "mpilab.bench.hub_client", "mpilab.bench.han",
    "mpilab.network", "mpilab.magics", "mpilab.coarray_view", "mpilab.validate",
    "mpilab.build", "mpilab.sources", "mpilab.doctor",
]


def module_files(name: str) -> list[Path]:
    """The source files of module or package `name`."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, name
    origin = Path(spec.origin)
    if origin.name == "__init__.py":
        return sorted(origin.parent.rglob("*.py"))
    return [origin]


def _is_property(fn) -> bool:
    return any((isinstance(d, ast.Name) and d.id in {"property", "cached_property", "overload"})
               or (isinstance(d, ast.Attribute) and d.attr in {"setter", "getter", "deleter",
                                                                 "cached_property", "overload"})
               for d in fn.decorator_list)


def public_functions(path: Path):
    """(qualified name, node) of each public function and public method in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_") and not _is_property(node):
                yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and not m.name.startswith("_") and not _is_property(m):
                    yield f"{node.name}.{m.name}", m


def parameters(fn) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return [n for n in names if n not in ("self", "cls")]


def _own_nodes(fn):
    """The nodes of `fn`'s body, not those of functions or classes defined inside it."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                      ast.ClassDef)):
                todo.append(child)


def returns_value(fn) -> bool:
    for node in _own_nodes(fn):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            return True
    return False


def section(doc: str, title: str) -> str | None:
    """The body of numpydoc section `title` in `doc`, or None."""
    m = re.search(rf"^\s*{title}\n\s*-{{3,}}\n(.*?)(?=^\s*\w[\w ]*\n\s*-{{3,}}\n|\Z)",
                  doc, re.M | re.S)
    return m.group(1) if m else None


def documented_names(body: str) -> set[str]:
    """The parameter names a Parameters section lists (``a, b : int`` lists two)."""
    names = set()
    indent = min((len(ln) - len(ln.lstrip()) for ln in body.splitlines() if ln.strip()),
                 default=0)
    for line in body.splitlines():
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            head = line.split(" : ", 1)[0].strip().rstrip(":")
            names.update(n.strip().lstrip("*") for n in head.split(","))
    return names


def runtime_doc(path: Path, qualname: str) -> str | None:
    """The docstring Python gives `qualname` of the module at `path` (what ``help()`` shows).

    Where a module writes its docstrings from one template (``TracingComm``'s wrappers, in
    :mod:`mpilab.tracing.recording`), the source has none: this is the one to check.
    """
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    obj = importlib.import_module(module.removesuffix(".__init__"))
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return inspect.getdoc(obj) if obj is not None else None


def problems(fn, doc: str | None = None) -> list[str]:
    """What `fn`'s docstring (`doc`: its docstring at run time, where not in the source) lacks."""
    return doc_problems(ast.get_docstring(fn) or doc, parameters(fn), returns_value(fn))


def doc_problems(doc: str | None, params: list[str], returns: bool) -> list[str]:
    """What a docstring lacks for a function of `params` that `returns` a value or not."""
    if not doc:
        return ["no docstring"]
    found = []
    if params:
        body = section(doc, "Parameters")
        if body is None:
            found.append("no Parameters section")
        else:
            missing = [p for p in params if p not in documented_names(body)]
            if missing:
                found.append(f"Parameters does not name {', '.join(missing)}")
    if returns and section(doc, "Returns") is None and section(doc, "Yields") is None:
        found.append("no Returns section")
    return found


@pytest.mark.parametrize("module", DOCUMENTED)
def test_public_functions_have_numpydoc_sections(module):
    bad = []
    for path in module_files(module):
        for name, fn in public_functions(path):
            doc = None if ast.get_docstring(fn) else runtime_doc(path, name)
            for p in problems(fn, doc):
                bad.append(f"{path.relative_to(ROOT)}:{fn.lineno} {name}: {p}")
    assert not bad, f"{len(bad)} gaps:\n" + "\n".join(bad)


#: Modules imported only in the process they are for: importing the student's kernel's
#: first module here would make this test process defer its compiles and start no engines
#: (mpilab.autograder.student), and the tests after it on this worker fail for that.
NOT_IMPORTED = {"mpilab.autograder.student"}


def made_functions(path: Path):
    """(name, function) of each public function module `path` makes at import rather than
    defines with ``def`` (a lab's ``check_X``, ``show_X``: ``Prediction.cells``)."""
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if name in NOT_IMPORTED:
        return
    defined = {n for n, _ in public_functions(path)}
    module = importlib.import_module(name.removesuffix(".__init__"))
    for attr, obj in vars(module).items():
        if isinstance(obj, types.FunctionType) and not attr.startswith("_") \
                and attr not in defined and obj.__module__ == module.__name__ \
                and obj.__name__ == attr:
            yield attr, obj


@pytest.mark.parametrize("module", DOCUMENTED)
def test_functions_made_at_import_have_numpydoc_sections(module):
    bad = []
    for path in module_files(module):
        if path.name == "__main__.py":
            continue
        for name, fn in made_functions(path):
            sig = inspect.signature(fn)
            returns = sig.return_annotation not in (None, "None", inspect.Signature.empty)
            for p in doc_problems(inspect.getdoc(fn), list(sig.parameters), returns):
                bad.append(f"{path.relative_to(ROOT)} {name}: {p}")
    assert not bad, f"{len(bad)} gaps:\n" + "\n".join(bad)
    from mpilab import build, cluster

    # importing the modules changed nothing in this process (see NOT_IMPORTED)
    assert build._DEFER == [False] and cluster.core._ON_FIRST_USE == [False], module


def test_the_checker_finds_what_is_missing():
    good = ast.parse('''
def f(a, b=1, *rest, key=None, **extra):
    """One line.

    Parameters
    ----------
    a, b : int
        Two.
    *rest : float
        More.
    key : str, optional
        A key.
    **extra
        Anything.

    Returns
    -------
    int
        The sum.
    """
    return a
''').body[0]
    assert problems(good) == []
    bad = ast.parse('''
def g(a, b):
    """One line.

    Parameters
    ----------
    a : int
        One.
    """
    def inner():
        return 1
    return b
''').body[0]
    assert problems(bad) == ["Parameters does not name b", "no Returns section"]
    nothing = ast.parse("def h(self):\n    '''Does.'''\n    return None\n").body[0]
    assert problems(nothing) == []
    assert problems(ast.parse("def k(x):\n    pass\n").body[0]) == ["no docstring"]
