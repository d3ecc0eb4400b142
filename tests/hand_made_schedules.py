"""Hand-made traced schedules for the collectives' checks, with no MPI: the per-rank
events of messages sent in rounds (:func:`rounds`), what a harness returns on rank 0 for
them (:func:`info_of`), and the message a check fails with (:func:`message`); shared by
tests/test_grading_collectives.py and tests/test_grading_allgather.py.
"""

from __future__ import annotations

import pytest

from mpilab import tracing
from mpilab.grading import CheckFailed


def message(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as info:
        check(*args, **kwargs)
    return str(info.value)


def info_of(events, untraced=()) -> dict:
    """What a harness returns on rank 0 for these per-rank events."""
    return {"schedule": tracing.schedule(events), "error": None, "untraced": list(untraced)}


def rounds(p, *rnds, nbytes=40):
    """Per-rank events of messages sent in rounds, each a list of (src, dst): in a round
    every rank posts its sends first, then its receives (as Sendrecv records them)."""
    ev = [[] for _ in range(p)]
    for rnd in rnds:
        for r in range(p):
            ev[r] += [("send", dst, nbytes) for src, dst in rnd if src == r]
            ev[r] += [("recv", src, nbytes) for src, dst in rnd if dst == r]
    return ev
