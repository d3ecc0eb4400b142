"""``%%mpi``: run a cell on every rank, with a timeout that is never optional.

``%%px`` (ipyparallel) waits forever on a deadlocked cell, and interrupting it kills the
MPI job anyway. ``%%mpi`` waits at most ``--timeout`` seconds (30 by default), then says
which ranks were still busy and what to do::

    %%mpi --timeout 5
    comm.Send(buf, dest=1 - comm.rank)   # both ranks send first: a deadlock past eager
    comm.Recv(buf, source=1 - comm.rank)

``--restart`` restarts the cluster at once after a timeout. The cell runs in each
engine's namespace, where ``MPI``, ``np``, ``comm``, ``rank`` and ``size`` are defined.
"""

from __future__ import annotations

import shlex


def _parse(line: str) -> tuple[float, bool]:
    timeout, restart = 30.0, False
    words = shlex.split(line)
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--timeout", "-t") and i + 1 < len(words):
            timeout = float(words[i + 1])
            i += 2
            continue
        if w.startswith("--timeout="):
            timeout = float(w.split("=", 1)[1])
        elif w == "--restart":
            restart = True
        else:
            raise ValueError(f"%%mpi: unknown option {w!r} (use --timeout SECONDS, --restart)")
        i += 1
    if timeout <= 0:
        raise ValueError("%%mpi: --timeout must be positive")
    return timeout, restart


def mpi(line: str, cell: str):
    """Run the cell on every MPI rank of this notebook's cluster, with a timeout.

    Each rank's output is shown once the cell has finished (also when it raised), as
    :meth:`mpilab.cluster.MPICluster.execute` shows it.

    Parameters
    ----------
    line : str
        The options after ``%%mpi``: ``--timeout SECONDS`` (or ``-t SECONDS``,
        ``--timeout=SECONDS``; default 30, positive) and ``--restart`` (restart the
        cluster at once after a timeout).
    cell : str
        The cell's code, run in each engine's namespace.

    Raises
    ------
    mpilab.cluster.ClusterError
        No cluster is running in this notebook, or it is unusable since an earlier
        failure.
    ValueError
        An unknown option, or a timeout that is not a positive number.
    mpilab.cluster.MPITimeout, mpilab.cluster.RankError, mpilab.cluster.ClusterDied
        Some rank was still busy after the timeout; the cell raised on some rank; an
        engine died.
    """
    from . import cluster

    c = cluster.current()
    if c is None:
        raise cluster.ClusterError("no cluster: run `lab = mpilab.cluster.start(ranks)` first")
    timeout, restart = _parse(line)
    c.execute(cell, timeout=timeout, restart_on_timeout=restart, line_offset=1)


def load_ipython_extension(ipython) -> None:
    """Make ``%%mpi`` available in this IPython session (``%load_ext mpilab.magics``).

    The cluster loads this extension when its engines are wired up in a notebook
    (:class:`mpilab.cluster.MPICluster`), so ``%%mpi`` comes with ``%px``.

    Parameters
    ----------
    ipython : IPython.core.interactiveshell.InteractiveShell
        The session to register :func:`mpi` in, as a cell magic.
    """
    ipython.register_magic_function(mpi, magic_kind="cell", magic_name="mpi")
