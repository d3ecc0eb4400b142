"""mpilab: measure how MPI communication performs.

A map of the package, lowest layer first (ARCHITECTURE.md; ``tests/test_layers.py``
checks that every import points down):

Foundations
    ``kernels`` (compiled C + Cython: ping-pong, stencil, one-sided, collectives),
    ``runtime`` (which MPI this machine has, how to launch it: root flags,
    oversubscription, transports), ``netlab`` (emulated nodes on one machine: network
    namespaces, shaped links), ``validate`` (argument checks with one wording: counts,
    name lists, sizes, the wave's parameters), ``models`` (Hockney fits, labelled predictions),
    ``tracing`` (message schedules from what ranks sent), ``coarray_view``, ``plots``
    (shared figure helpers).
Running jobs
    ``jobs`` (the one way to start an MPI job and end it, with every process and
    shared-memory segment), ``cluster`` (ipyparallel MPI engines: timeouts, one-call
    restart), ``timing`` (one timing protocol, tidy records), ``build`` (Cython compiled
    from a notebook), ``magics``, ``notebooks``; the ``autograder``'s machinery
    (``sandbox``, ``scratch``, the grader's MPI ranks ``pool`` and ``worker``, their
    format ``wire``, the grading lock ``quiet``).
Teaching API (one module per topic)
    ``halo`` (heat and wave problems, decomposition, serial references, exchanges),
    ``pingpong`` (every measurement of a message between two ranks: the C and mpi4py
    loops, a local copy, buffers, pairs at once, forwarded arrays),
    ``collectives`` (collective algorithms: run, trace, time, predict), ``tuning`` (the
    library's choice: measure every algorithm, compare, tune), ``coarrays`` (Coarray
    Fortran and MPI Fortran programs); ``plots.<topic>`` (the lectures' figures);
    ``grading`` (the graded-check policy) with ``grading.<topic>`` (the labs' checks:
    ``halo``, ``onesided``, ``collectives``, ``allgather``); ``autograder.student`` and
    ``autograder.isolated`` (a student's objects handed over to the grader's kernel,
    which call back into the checks).
Front ends
    ``bench`` (``python -m mpilab.bench <name>``: every experiment as JSON from the
    command line, all with the same arguments, timeout and exit codes),
    ``autograder.nbgrader`` (the autograde preprocessors), ``autograder.course``,
    ``autograder.bench`` and ``autograder.parallel`` (a course to autograde, what
    autograding costs, gradings side by side).
"""

__version__ = "0.1.0"
