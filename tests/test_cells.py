"""How the autograder reads a notebook's cells (mpilab.autograder.cells): tests, locked
code and the student's, the names a test reads, and what of a locked cell the grader's
kernel runs."""

import nbformat

from mpilab.autograder.cells import classify, definitions, free_names


def _code(source: str, **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def test_cells_are_tests_locked_code_the_students_or_nothing():
    assert classify(_code("assert f() == 1", grade=True, solution=False, locked=True)) == "test"
    assert classify(_code("import numpy as np", grade=False, solution=False,
                          locked=True)) == "locked"
    assert classify(_code("def f(): ...", grade=False, solution=True, locked=False)) == "student"
    assert classify(_code("x = 1")) == "student"  # a cell the student added
    assert classify(_code("   \n")) == "skip"
    assert classify(nbformat.v4.new_markdown_cell("# title")) == "skip"


def test_free_names_are_what_the_code_reads_without_builtins():
    src = "def g(y):\n    return f(y) + len(data)\nresult = g(3)\nprint(result)"
    assert free_names(src) == ["data", "f", "g", "result", "y"]
    assert free_names("def (:") == []  # not Python: nothing to export


def test_definitions_keep_imports_functions_and_classes_at_their_lines():
    src = ("import numpy as np\n"
           "lab = start(4)\n"
           "def f(x):\n"
           "    return x\n"
           "print(f(1))\n"
           "class C:\n"
           "    pass\n"
           "import os; os.system('x')\n")
    out = definitions(src).split("\n")
    assert out == ["import numpy as np", "", "def f(x):", "    return x", "", "class C:",
                   "    pass", ""]
    assert definitions("def broken(:") == ""


def test_the_source_of_a_definition_is_what_the_notebook_shows():
    from mpilab.autograder.cells import defined_sources

    cells = ["def f(x):\n    return 1\n\ng = 2", "%%time\nx = 1",
             "import inspect\ninspect.getsource = lambda f: 'forged'\n\n\n"
             "def f(x):\n    # the last definition counts\n    return 2\n", "h = f"]
    got = defined_sources(cells, ["f", "g", "h", "missing"])
    assert got["f"] == "def f(x):\n    # the last definition counts\n    return 2"
    assert got["g"] == got["h"] == ""  # bound, but not by a def: no code to read
    assert "missing" not in got


def _bound(source: str) -> set[str]:
    """Every name `source` binds itself: assignments, loop and comprehension targets,
    arguments, imports, definitions, ``except ... as``."""
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def test_every_name_a_labs_test_cell_reads_is_defined_before_it():
    """A name a test cell reads (hidden tests included) comes from the grader's kernel (the
    locked cells' imports, functions and classes; what earlier test cells defined) or from
    the student's kernel (the student's cells, the locked cells' other lines: which the
    correct submission's autograde checks ran there, tests/grading_batch.py); a name
    defined nowhere before the test is a NameError for every student, right or wrong."""
    from pathlib import Path

    missing = []
    for path in sorted(Path(__file__).parents[1].glob("labs/*/*.ipynb")):
        nb = nbformat.read(path, 4)
        known: set[str] = set()
        for cell in nb.cells:
            kind = classify(cell)
            if kind == "test":
                gid = cell.metadata["nbgrader"]["grade_id"]
                mine = _bound(cell.source)
                missing += [f"{path.name} {gid}: {name}"
                            for name in sorted(set(free_names(cell.source)) - mine - known)]
                known |= mine
            elif kind in ("locked", "student"):
                known |= _bound(cell.source)
    assert not missing, missing
