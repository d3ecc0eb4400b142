"""An ipyparallel cluster of MPI engines that cannot get stuck.

>>> from mpilab import cluster
>>> lab = cluster.start(4)                # 4 MPI ranks; reuses this notebook's cluster
>>> lab.run(lambda: MPI.COMM_WORLD.rank)  # -> [0, 1, 2, 3], one result per rank
>>> lab.restart()                         # after a deadlock, a crash or a killed engine

Every call that waits on the engines has a timeout. A deadlocked or crashed MPI job
cannot be repaired one engine at a time (interrupting one engine kills the whole MPI
job), so the cure is always the same: stop every process of the cluster and start
again. :meth:`MPICluster.restart` does that in one call and re-activates ``%px``.

Each notebook gets its own cluster id (from the notebook's path), so two notebooks or
two students on one host never share engines, and a notebook that starts its cluster
again reconnects in well under a second.

The package's rooms: :mod:`.core` (:class:`MPICluster`, running code, :func:`start`,
:func:`connect`), :mod:`.launchers` (starting and stopping its processes, on this host or
on emulated nodes), :mod:`.slurm` (the Slurm launcher), :mod:`.diagnostics` (stack dumps,
where a busy rank was, finding and killing a cluster's processes), :mod:`.errors`, and
the command line, ``python -m mpilab.cluster start|stop|status|clean`` (``__main__``).
"""

from .core import (
    DEFAULT_TIMEOUT,
    LAUNCHERS,
    MPICluster,
    _set_current,  # noqa: F401 - the tests pin their cluster with it
    connect,
    current,
    default_cluster_id,
    start,
    start_engines_on_first_use,
)
from .diagnostics import cluster_processes, kill_cluster_processes
from .errors import ClusterDied, ClusterError, MPITimeout, RankError

__all__ = ["MPICluster", "start", "connect", "current", "start_engines_on_first_use",
           "default_cluster_id", "DEFAULT_TIMEOUT", "LAUNCHERS",
           # a cluster's processes (.diagnostics), and what a call raises (.errors)
           "cluster_processes", "kill_cluster_processes",
           "ClusterError", "ClusterDied", "MPITimeout", "RankError"]
