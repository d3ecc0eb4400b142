"""The command line: ``python -m mpilab.cluster start|stop|status|clean``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import cluster, netlab, runtime
from .core import LAUNCHERS, MPICluster, connect
from .diagnostics import kill_cluster_processes
from .errors import ClusterError


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpilab.cluster",
                                description=cluster.__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a cluster that outlives this command")
    s.add_argument("--ranks", "-n", type=int, default=4, help="MPI ranks (engines)")
    s.add_argument("--transport", choices=runtime.TRANSPORTS, default="shm")
    s.add_argument("--id", default="mpilab-default")
    s.add_argument("--nodes", type=int, default=None,
                   help="spread the ranks over N emulated nodes (root; mpilab.netlab)")
    s.add_argument("--link", default="fast-ethernet", choices=list(netlab.PROFILES))
    s.add_argument("--map-by", default="node", choices=("node", "slot"))
    s.add_argument("--launcher", default="local", choices=LAUNCHERS,
                   help="slurm: the controller and the engines are Slurm jobs")
    s.add_argument("--partition", default=None, help="Slurm partition (with --launcher slurm)")
    s.add_argument("--time-limit", default=None, help="Slurm time limit, e.g. 01:00:00")
    st = sub.add_parser("stop", help="stop a cluster")
    st.add_argument("--id", default="mpilab-default")
    sub.add_parser("clean", help="kill every mpilab cluster process of this user")
    ss = sub.add_parser("status", help="is the cluster answering?")
    ss.add_argument("--id", default="mpilab-default")
    a = p.parse_args(argv)
    if not a.cmd == "clean" and not a.id.startswith("mpilab-"):
        p.error("cluster ids start with 'mpilab-'")
    if a.cmd == "start":
        c = MPICluster(a.ranks, a.transport, a.id, nodes=a.nodes, link=a.link, map_by=a.map_by,
                       launcher=a.launcher, partition=a.partition, time_limit=a.time_limit)
        c.persistent_nodes = True  # the nodes stay up with the cluster, until `stop`
        try:
            c.start()
        except ClusterError as exc:
            print(exc, file=sys.stderr)
            return 2
        c.keep_after_exit()  # running for a later connect()
        print(f"{c!r} started in {c.timings.get('start_s', c.timings.get('reconnect_s', 0)):.1f} s")
        return 0
    if a.cmd == "stop":
        n = kill_cluster_processes(a.id)
        MPICluster(1, "shm", a.id)._kill_everything()  # and its emulated nodes, if any
        print(f"stopped {a.id} ({n} processes)")
        return 0
    if a.cmd == "status":
        try:
            c = connect(a.id)
        except ClusterError as exc:
            print(exc)
            return 1
        print(f"{c!r}: {'healthy' if c.healthy() else 'not answering'}")
        return 0 if c.healthy() else 1
    print(f"killed {kill_cluster_processes(None)} processes")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
