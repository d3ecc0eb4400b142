"""Graded checks for the mpilab labs: run the student's code on MPI ranks, compare, explain.

Every graded cell of the labs goes through this package, so grading policy lives here::

    from mpilab.grading import run_on_ranks, expect_per_rank
    saw = run_on_ranks(ring_pass, 10, ranks=3)   # ring_pass(comm, 10) on 3 ranks
    expect_per_rank(saw, [13, 10, 11], what="saw")

This module only re-exports; the policy is in its modules:

* :mod:`~mpilab.grading.running`: running the student's code (:func:`run_on_ranks` on
  the notebook's cluster or, at autograde time, on the grader's sandboxed ranks;
  :func:`call_local` here under a timer), and where the verdicts are decided;
* :mod:`~mpilab.grading.compare`: the comparisons that say what is wrong (``expect_*``);
* :mod:`mpilab.autograder.failures`: what a failed check raises (:class:`CheckFailed`, an
  ``AssertionError``, and its kinds) and which functions already timed out;
* one module per lab topic (``halo``, ``onesided``, ``collectives`` ...), imported by
  name, and :mod:`~mpilab.grading.measured` for the graded predictions.
"""

from __future__ import annotations

from ..autograder.failures import (
    BadResult,
    CheckFailed,
    EngineDied,
    RaisedError,
    Skipped,
    TimedOut,
    Ungradable,
    forget_timeouts,
)
from ..autograder.quiet import measuring
from .compare import (
    _is_num,  # noqa: F401 - the labs' checks call grading._is_num
    expect,
    expect_close,
    expect_equal,
    expect_per_rank,
    expect_timing,
)
from .running import (
    autograding,
    call_local,
    not_while_grading,
    run_on_ranks,
    source_of,
    try_on_ranks,
)

__all__ = ["CheckFailed", "TimedOut", "Skipped", "RaisedError", "EngineDied", "BadResult",
           "Ungradable", "run_on_ranks", "try_on_ranks", "call_local", "expect", "expect_equal",
           "expect_close", "expect_per_rank", "expect_timing", "measuring", "autograding",
           "not_while_grading", "source_of", "forget_timeouts"]
