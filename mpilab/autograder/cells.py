"""Reading a notebook's cells as the autograder does: which cells are tests, the
instructor's locked code or the student's (:func:`classify`), the names a test reads
(:func:`free_names`: what the grader's kernel must get from the student's), and what of
a locked cell the grader's kernel runs (:func:`definitions`).
"""

from __future__ import annotations

import ast
import builtins

from nbformat import NotebookNode

__all__ = ["classify", "free_names", "definitions", "defined_sources"]

_BUILTINS = set(dir(builtins))



def classify(cell: NotebookNode) -> str:
    """``test`` (autograder tests), ``locked`` (the instructor's code), ``student`` or ``skip``.

    Parameters
    ----------
    cell : NotebookNode
        A cell of the notebook being graded, with its ``nbgrader`` metadata.

    Returns
    -------
    str
        ``"skip"`` for a markdown or empty cell; ``"test"`` for a graded cell that is not a
        solution; ``"locked"`` for a locked cell that is not a solution; ``"student"`` for
        every other code cell (solutions and unmarked cells).
    """
    if cell.cell_type != "code" or not cell.source.strip():
        return "skip"
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("grade") and not meta.get("solution"):
        return "test"
    if meta.get("locked") and not meta.get("solution"):
        return "locked"
    return "student"


def free_names(source: str) -> list[str]:
    """Names the code reads (anywhere, function bodies included), builtins left out.

    Parameters
    ----------
    source : str
        The Python source of a cell.

    Returns
    -------
    list of str
        The names loaded anywhere in `source`, sorted, without duplicates or builtins;
        empty when `source` does not parse.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)}
    return sorted(names - _BUILTINS)


_DEFINITION = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(source: str) -> str:
    """The imports, functions and classes of a locked cell, every other line blanked.

    What the grader's kernel runs of the instructor's locked cells: their definitions, at
    their own line numbers, without their side effects (starting a cluster, printing).
    A definition that shares a line with another statement is left out too.

    Parameters
    ----------
    source : str
        The Python source of a locked cell.

    Returns
    -------
    str
        `source` line for line (at the same line numbers), every line that is not part of a
        top-level import, function or class (decorators included) replaced by an empty
        one; ``""`` when `source` does not parse.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    lines = source.splitlines()
    keep = [False] * len(lines)
    other = [False] * len(lines)
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = range(first - 1, node.end_lineno)
        for i in span:
            (keep if isinstance(node, _DEFINITION) else other)[i] = True
    for node in tree.body:
        if isinstance(node, _DEFINITION):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            if any(other[i] for i in range(first - 1, node.end_lineno)):
                for i in range(first - 1, node.end_lineno):
                    keep[i] = False
    return "\n".join(ln if keep[i] and not other[i] else "" for i, ln in enumerate(lines))


def defined_sources(sources: list[str], names) -> dict[str, str]:
    """What the notebook shows of each of `names`: the text of its last top-level
    ``def`` (or ``class``) in `sources`, the cells in the order they ran.

    The checks that read a student's code read this, never what the student's kernel
    reports (a submission can make ``inspect.getsource`` say anything in its own kernel).
    A name last bound otherwise (``f = g``, in a loop, by ``exec``) gets ``""``: no code
    to read.

    Parameters
    ----------
    sources : list of str
        The source of each student and locked cell run so far, in order.
    names : iterable of str
        The names a test cell reads.

    Returns
    -------
    dict of str to str
        For each name some cell binds at top level, its definition's text (``""`` when
        the last binding is not a ``def`` or ``class``).
    """
    want = set(names)
    out: dict[str, str] = {}
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            try:  # IPython's syntax (magics, shell escapes), as the kernel ran it
                from IPython.core.inputtransformer2 import TransformerManager

                src = TransformerManager().transform_cell(src)
                tree = ast.parse(src)
            except (SyntaxError, ImportError):
                continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in want:
                    out[node.name] = ast.get_source_segment(src, node) or ""
            else:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) \
                            and sub.id in want:
                        out[sub.id] = ""
    return out
