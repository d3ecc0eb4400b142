"""mpilab: measure how MPI communication performs.

Modules: ``runtime`` (what MPI this machine has and how to launch it), ``cluster``
(ipyparallel MPI engines with timeouts and one-call restart), ``timing`` (one protocol,
tidy records), ``models`` (Hockney fits, labelled predictions), ``plots``, ``grading``
(every graded check of the labs), ``bench`` (``python -m mpilab.bench``), ``kernels``
(compiled C + Cython).
"""

__version__ = "0.1.0"
