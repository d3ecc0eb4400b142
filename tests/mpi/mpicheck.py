"""What the MPI check scripts (tests/mpi/check_*.py) share: checks, failures, the verdict.

The scripts run as ``python tests/mpi/check_x.py`` under mpiexec, so this folder is on
sys.path and ``from mpicheck import ...`` finds this module. Every rank runs every check;
a failure is recorded as "FAIL ..." and printed by :func:`finish`, which exits 1;
success prints "OK rank <r>" (what tests/test_*.py count).
"""

import sys
import traceback

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
failures = []


def check(fn):
    """Run ``fn`` now (as a decorator), record its exception as a failure, then Barrier."""
    try:
        fn()
    except Exception:
        failures.append(f"FAIL {fn.__name__} on rank {rank}: {traceback.format_exc()}")
    comm.Barrier()
    return fn


def expect(cond, what):
    """Record a failure and go on: raising mid-loop would leave the other ranks waiting in
    the next collective call."""
    if not cond:
        failures.append(f"FAIL on rank {rank}: {what}")


def raises(exc, fn, *args, **kwargs):
    """Call ``fn(*args, **kwargs)``; AssertionError unless it raises ``exc``."""
    try:
        fn(*args, **kwargs)
    except exc:
        return
    raise AssertionError(f"{fn.__name__}{args!r:.60}{kwargs!r:.60} did not raise "
                         f"{exc.__name__}")


def finish(together=False):
    """Print the failures and exit: 1 on failure, else print "OK rank <r>" and exit 0.

    ``together``: the verdict is agreed by every rank (a failure anywhere fails every
    rank) and the OK line reads "OK rank <r> of <size>".
    """
    if together:
        ok = comm.allreduce(len(failures) == 0, op=MPI.LAND)
        for f in failures:
            print(f, flush=True)
        if ok:
            print(f"OK rank {rank} of {size}", flush=True)
        sys.exit(0 if ok else 1)
    if failures:
        print("\n".join(failures), flush=True)
        sys.exit(1)
    print(f"OK rank {rank}", flush=True)
