"""The lectures, executed headless once per test process, and what the tests read of them.

:func:`executed` runs ``lectures/<stem>.md`` through :mod:`mpilab.notebooks` with
``MPILAB_QUICK=1`` (small sweeps) the first time a test asks for it, and hands every later
test of the process the same notebook: this module holds the one cache (``_runs``) that
tests/test_lectures.py and the per-lecture modules share. Imported where nbclient, jupytext
or MPI is missing, it skips the module that imports it, saying which.
"""

import os
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("jupytext")

from mpilab import notebooks, runtime  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CELL_TIMEOUT = 420  # seconds: a hang guard (every MPI job in a cell has its own timeout);
# lecture 04's quick sweep cell takes 170 s on 2 cores beside other tests, more under load

try:
    runtime.mpiexec()
except runtime.MPINotFound as exc:  # pragma: no cover - depends on the machine
    pytest.skip(f"no MPI: {exc}", allow_module_level=True)

_runs: dict = {}
# "1": small sweeps; "auto": the lecture decides from the machine (tests/test_container.py
# runs lecture 02 inside a one-CPU cgroup that way)
QUICK = os.environ.get("MPILAB_QUICK", "1")


def executed(stem: str):
    """The lecture `stem`, executed once per test session (quick sweeps)."""
    if stem not in _runs:
        try:
            _runs[stem] = notebooks.execute(ROOT / "lectures" / f"{stem}.md",
                                            timeout=CELL_TIMEOUT, env={"MPILAB_QUICK": QUICK})
        except Exception as exc:  # reported by every test that needs this lecture
            _runs[stem] = exc
    nb = _runs[stem]
    if isinstance(nb, Exception):
        pytest.fail(f"{stem} did not run to the end: {type(nb).__name__}: {nb}")
    return nb


def text_of(cell) -> str:
    """Everything a code cell showed: streams, plain and HTML results, errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
        else:
            data = out.get("data", {})
            parts += [data.get("text/plain", ""), data.get("text/html", "")]
    return "\n".join(parts)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def cell_with(nb, snippet: str):
    """The first code cell whose source contains `snippet`."""
    for c in code_cells(nb):
        if snippet in c.source:
            return c
    raise AssertionError(f"no code cell contains {snippet!r}")


def tagged(cell, tag="raises-exception") -> bool:
    return tag in cell.metadata.get("tags", [])

