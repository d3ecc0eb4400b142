"""The library's choice: measure every allgather algorithm, compare, tune.

The allgather paper's question, "did the library pick the best algorithm?", asked on the
machine in use. :func:`measure` times every admissible allgather algorithm of the library
(each one forced), the course's C version of each beside it, and the library's default, in
the same MPI job(s), so ratios compare like with like; :func:`summary` turns the records
into own/library ratios and the k-of-n count. :func:`tune` does that for several process
counts and writes a decision table; :func:`write_ompi_rules` turns the table into an Open
MPI ``coll_tuned`` rules file and :func:`rules_env` into the environment that applies it;
:func:`library_run` times the library's choice with such an environment.
:func:`library_default` is Open MPI 4.1's documented decision (derived from its source,
not queried) and :func:`observe_library` sees which algorithm the library really ran,
from its messages (pml monitoring).

The algorithms themselves, and their traces and predictions, are in
:mod:`mpilab.collectives`; ``python -m mpilab.bench allgather`` is the command-line front
end (its tables and report).

The package's modules: :mod:`.decisions` (forcing an algorithm, the documented default,
the decision table and its test, the rules file), :mod:`.observing` (what the library really ran),
:mod:`.measuring` (:func:`measure`, :func:`summary`, :func:`tune`, :func:`library_run`)
and ``__main__`` (the measuring and observing jobs' ranks). Every name is here as
``tuning.<name>``.
"""

# ruff: noqa: F401 - the names beyond __all__ are the module's API as before the split
from __future__ import annotations

from .decisions import (
    _OMPI_COLL_ID,
    _REDUCE_NAMES,
    _REDUCE_RULE,
    ALPHA,
    TEST,
    _reduce_default,
    beyond_noise,
    decision_table,
    faster_p,
    holm,
    library_default,
    library_env,
    library_has,
    rules_env,
    write_ompi_rules,
)
from .measuring import (
    CVAR,
    MODULE,
    TOLERANCE,
    _by,
    _jobs,
    _worker,
    library_run,
    measure,
    summary,
    tune,
)
from .observing import (
    _observe_worker,
    _sent_blocks,
    observe_library,
)

__all__ = [
    "decision_table",
    "faster_p",
    "holm",
    "library_default",
    "library_env",
    "library_has",
    "library_run",
    "measure",
    "observe_library",
    "rules_env",
    "summary",
    "tune",
    "write_ompi_rules",
]
