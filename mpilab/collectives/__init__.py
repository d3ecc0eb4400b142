"""Collective algorithms: run, trace, time and predict them.

The algorithms themselves are C on point-to-point messages (``kernels/collectives``):
broadcast (linear, DECK's binary tree, MPI's binomial tree), reduce (gather then reduce
once as DECK, binomial, butterfly by recursive halving), allreduce (recursive doubling,
ring), barrier (linear, tree, dissemination), scatter and gather (linear, binomial) and
the allgather family of the Open MPI paper (linear, Bruck, recursive doubling, ring,
neighbor exchange, two-proc), alltoall (pairwise exchange, Bruck) and reduce-scatter with
equal blocks (``reduce_scatter_block``: ring, recursive halving). ``"library"`` as the
algorithm means MPI's own collective.

Functions taking ``comm`` are collective: every rank calls them (under ``mpiexec`` or
on the engines, ``cluster.run(collectives.trace, None, "allgather", "bruck", 1024)``;
``comm=None`` means ``MPI.COMM_WORLD``) and every rank gets the same answer.

:func:`predict` gives Hockney-model costs (α + n/β per message), always labelled as
predictions (:class:`mpilab.models.Prediction`). Measuring the library's own algorithms
against each other and against its choice, and tuning it, is :mod:`mpilab.tuning`.

The package is split by concern, and re-exports every name: the registry of algorithms,
their costs and predictions (:mod:`~mpilab.collectives.algorithms`), and running, tracing
and timing one (:mod:`~mpilab.collectives.running`).

Examples
--------
>>> ALGORITHMS["allgather"]["bruck"].steps(8)
3
>>> print(predict("allgather", "ring", 4, 1024, alpha_us=1.0, beta_MBps=1000.0))
prediction: 6.07 µs for 1,024 B (ring allgather on 4 ranks, Hockney α = 1 µs, β = 1 GB/s)
"""

from .algorithms import (
    ALGORITHMS,
    LIBRARY,
    OMPI_NAMES,
    OPS,
    Algorithm,
    admissible,
    algorithm,
    predict,
    predict_table,
)
from .running import calibrate, events, kernel_module, run, time_alg, trace

__all__ = [
    "ALGORITHMS",
    "LIBRARY",
    "OMPI_NAMES",
    "OPS",
    "Algorithm",
    "admissible",
    "algorithm",
    "calibrate",
    "events",
    "kernel_module",
    "predict",
    "predict_table",
    "run",
    "time_alg",
    "trace",
]
