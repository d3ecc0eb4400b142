"""mpilab: measure how MPI communication performs.

Modules: ``runtime`` (what MPI this machine has and how to launch it), ``cluster``
(ipyparallel MPI engines with timeouts and one-call restart), ``timing`` (one protocol,
tidy records), ``models`` (Hockney fits, labelled predictions), ``plots``, ``plots_halo``
and ``plots_collectives`` (the lectures' figures), ``halo`` (the heat and wave problems,
decomposition, serial references, kernel drivers), ``collectives`` (collective algorithms,
the library's forced algorithms, cost models, auto-tuner), ``tracing`` (message schedules
from what ranks sent), ``grading`` (every graded check of the labs) with ``grading_halo``
and ``grading_collectives`` (the labs' harnesses), ``build`` (Cython compiled from a
notebook), ``bench`` (``python -m mpilab.bench``), ``kernels`` (compiled C + Cython).
"""

__version__ = "0.1.0"
