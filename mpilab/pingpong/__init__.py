"""The ping-pong: one owner for every measurement of a message between two ranks.

Lectures 00, 01, 05, 06 and 07, the labs' graders (:mod:`mpilab.grading.measured`), the
simulator's calibration (:mod:`mpilab.sim`) and the command lines
(``python -m mpilab.bench pingpong|buffers|contention|forwarding|matching``, which only parse
arguments, call this package and write the JSON) all measure here. The timing protocol
and the records are :mod:`mpilab.timing`'s; the buffers are :mod:`mpilab.buffers`'.

Two timed loops are kept on purpose. The course measures with the compiled C kernel
(:mod:`mpilab.kernels.pingpong`, ``impl="kernel"``, and the same loop as a standalone
program, :func:`standalone`); a second loop in Python sends with mpi4py's buffer
``Send``/``Recv`` of NumPy arrays (``impl="mpi4py"`` in :func:`measure_pingpong`, and the
round trips of :func:`round_trip`, :func:`one_way_times` and :func:`alpha_beta`) because
that is the path the students' code takes: lecture 01 compares the two, side by side,
to show what Python costs per message, and labs 00 and 01 grade the students' mpi4py code
and their predictions against mpi4py ``Send``/``Recv`` of NumPy arrays timed just now, not
against C. :func:`forwarding_times` is a third loop, which times several operations in one
loop so that a change of the machine's state reaches all of them alike.

The package's modules: :mod:`.loops` (on the ranks: the two ping-pong loops, their
calibration, the records, the grader's one-way times and α/β, resent against forwarded),
:mod:`.copying` (a local copy and a cache line's round trip), :mod:`.notebook` (the same
on a running cluster, as a DataFrame), :mod:`.experiments` (MPI jobs of their own: the
implementations and thread levels side by side, the standalone C program, the kinds of
buffer), :mod:`.sharing` (pairs at once, forwarded arrays over time) and :mod:`.matching`
(a ping-pong past queued receives or unexpected messages, a receiver that posts late:
message matching, eager and rendezvous); their jobs' ranks
run ``python -m mpilab.pingpong --worker`` (``__main__``). Every name is here as
``pingpong.<name>``.
"""

from .copying import line_round_trip_ns, measure_memcopy
from .experiments import (
    JOB_IMPLS,
    MECHANISMS,
    buffers_table,
    measure_standalone,
    pingpong_table,
    run_buffers,
    run_pingpong,
    standalone,
)
from .loops import (
    IMPLS,
    MODES,
    WINDOW,
    alpha_beta,
    calibrate_iters,
    forwarding_times,
    measure_pingpong,
    one_way_times,
    round_trip,
)
from .matching import (
    DELAY_US,
    DEPTHS,
    LATE,
    LATE_SIZES,
    QUEUES,
    WILDCARDS,
    fit_search,
    late_times,
    matching_table,
    queue_times,
    run_matching,
)
from .notebook import forwarding, memcopy, pingpong
from .sharing import (
    contention_table,
    default_pairs,
    forwarding_table,
    run_contention,
    run_forwarding,
)

__all__ = ["IMPLS", "MODES", "WINDOW", "JOB_IMPLS", "MECHANISMS",
           # on the ranks
           "round_trip", "calibrate_iters", "measure_pingpong", "one_way_times", "alpha_beta",
           "forwarding_times", "measure_memcopy", "line_round_trip_ns",
           # on a cluster
           "pingpong", "forwarding", "memcopy",
           # jobs of their own
           "standalone", "measure_standalone", "run_pingpong", "pingpong_table",
           "run_buffers", "buffers_table", "default_pairs", "run_contention",
           "contention_table", "run_forwarding", "forwarding_table",
           # message matching
           "DEPTHS", "QUEUES", "WILDCARDS", "LATE", "LATE_SIZES", "DELAY_US", "queue_times",
           "late_times", "run_matching", "matching_table", "fit_search"]
