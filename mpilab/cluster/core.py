"""The cluster itself: :class:`MPICluster` (its settings, running code on every rank with
a timeout, health, stop and restart) and this process's cluster (:func:`start`,
:func:`connect`, :func:`current`).

How its processes start and stop is in :mod:`.launchers` and :mod:`.slurm`; where busy
ranks are, in :mod:`.diagnostics`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import netlab, runtime, validate
from .diagnostics import Diagnostics, _join, _where_in_cell, _where_in_function
from .errors import ClusterDied, ClusterError, MPITimeout, RankError
from .launchers import Launchers, _rank_and_host
from .slurm import SlurmJobs

DEFAULT_TIMEOUT = 30.0
# How the controller and the engines start: "local" (processes of this host) or "slurm"
# (two batch jobs: the controller, and the engines as one MPI job in their allocation).
LAUNCHERS = ("local", "slurm")
_current: MPICluster | None = None
# start() leaves the engines to start at first use (start_engines_on_first_use)
_ON_FIRST_USE: list[bool] = [False]


# ---------------------------------------------------------------------------------------
# naming


def _notebook_path() -> str | None:
    """Path of the notebook this kernel runs, when Jupyter tells us."""
    for var in ("JPY_SESSION_NAME", "MPILAB_NOTEBOOK"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None and ip.user_ns.get("__session__"):
            return str(ip.user_ns["__session__"])
    except ImportError:  # pragma: no cover
        pass
    return None


def default_cluster_id() -> str:
    """A cluster id unique to this notebook (or, outside Jupyter, to this process).

    Returns
    -------
    str
        ``mpilab-<name>-<hash>``: the notebook's (or script's) name, and a hash of the
        user and the notebook's path (outside Jupyter: the working folder and process id).
    """
    where = _notebook_path()
    if where:
        key = os.path.abspath(where)
        stem = Path(where).stem
    else:
        key = f"{os.getcwd()}:{os.getpid()}"
        stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python"
    user = os.environ.get("USER") or str(os.getuid())
    digest = hashlib.sha1(f"{user}:{key}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", stem).strip("-")[:24] or "nb"
    return f"mpilab-{slug}-{digest}"



class MPICluster(Launchers, SlurmJobs, Diagnostics):
    """ipyparallel engines forming one MPI job (``MPI.COMM_WORLD`` of size `ranks`).

    Its methods live by concern: starting, reconnecting and ending its processes in
    :class:`~.launchers.Launchers`, the Slurm jobs in :class:`~.slurm.SlurmJobs`, stack
    dumps and what a timeout says in :class:`~.diagnostics.Diagnostics`; running code,
    health, stop and restart here.

    Parameters
    ----------
    ranks : int
        Number of engines, i.e. MPI ranks (read back as :attr:`ranks`). More than the
        machine's cores works (the job runs oversubscribed, and :attr:`info` says so).
    transport : {"shm", "tcp"}
        ``shm``: the library's shared-memory path between ranks of one host.
        ``tcp``: force the TCP stack over loopback, the path a message between nodes
        takes, minus the wire.
    cluster_id : str, optional
        Defaults to :func:`default_cluster_id`.
    start_timeout : float
        Seconds to wait for all engines to register.
    nodes : int, optional
        Spread the ranks over this many emulated nodes (:mod:`mpilab.netlab`, root
        only), brought up with the cluster and removed when it stops. None: this host.
    link : str
        The emulated nodes' link profile (``fast-ethernet``, ``gige``, ``10gbe``,
        ``unshaped``).
    map_by : {"node", "slot"}
        ``node``: ranks dealt round-robin over the nodes; ``slot``: node0 filled first.
    launcher : {"local", "slurm"}
        ``slurm``: the controller and the engines are Slurm batch jobs, submitted with
        ``sbatch`` through ipyparallel's ``SlurmControllerLauncher`` and
        ``SlurmEngineSetLauncher``; the engines are one ``mpiexec`` (the command
        :func:`mpilab.runtime.launch` gives) inside a job of `ranks` tasks. :meth:`stop` and
        :meth:`restart` cancel the jobs (docs/cluster.md).
    partition, time_limit : str, optional
        Slurm only: ``sbatch --partition`` and ``--time`` of both jobs.
    sbatch_args : sequence of str
        Slurm only: more ``sbatch`` options for both jobs (``["--account=hpc101"]``).
    """

    def __init__(self, ranks: int = 4, transport: str = "shm", cluster_id: str | None = None,
                 start_timeout: float = 60.0, *, nodes: int | None = None,
                 link: str = "fast-ethernet", map_by: str = "node", launcher: str = "local",
                 partition: str | None = None, time_limit: str | None = None,
                 sbatch_args: Sequence[str] = ()):
        # validates ranks and transport; a crashed rank must not hide which one it was
        # engines have threads besides the one that calls MPI (ipykernel's): funneled;
        # the count is the launch's alone (:attr:`ranks`)
        self.launch = runtime.launch(ranks, transport, crash_ends_job=False,
                                     thread_level="funneled")
        if launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
        if launcher == "slurm" and nodes is not None:
            raise ValueError("emulated nodes (nodes=...) run on this host, not under Slurm")
        if launcher != "slurm" and (partition or time_limit or sbatch_args):
            raise ValueError("partition, time_limit and sbatch_args are for launcher='slurm'")
        self.launcher = launcher
        self.partition, self.time_limit = partition, time_limit
        self.sbatch_args = [str(a) for a in sbatch_args]
        self.slurm_overcommit = False  # more ranks than the partition has CPUs
        if nodes is not None:
            validate.count(nodes, "nodes")
            netlab.link_profile(link)  # a clear error for an unknown profile, now
            if map_by not in ("node", "slot"):
                raise ValueError(f"map_by must be 'node' or 'slot', got {map_by!r}")
        self.nodes, self.link, self.map_by = nodes, link, map_by
        self.fabric: netlab.Fabric | None = None
        self.persistent_nodes = False  # True: the nodes outlive this process (the CLI)
        self.hosts: list[str] = []  # hostname of each rank
        self.transport = transport
        self.cluster_id = cluster_id or default_cluster_id()
        self.start_timeout = start_timeout
        self._cluster = None
        self.client = None
        self.view = None
        self.rank_ids: list[int] = []  # the rank of each engine of `view`, in order
        self.pids: list[int] = []  # engine process ids, by rank (same host only)
        self.library: dict = {}  # the MPI library the engines loaded (asked of rank 0)
        self.broken: str | None = None
        self.lazy = False  # start on first use (the student's kernel at autograde time)
        self.timings: dict[str, float] = {}

    # -- description -------------------------------------------------------------------
    @property
    def ranks(self) -> int:
        """Number of MPI ranks (engines): its launch's, the one place the count is kept."""
        return self.launch.ranks

    @property
    def info(self) -> dict:
        """Settings every measurement record carries."""
        d = {
            "cluster_id": self.cluster_id,
            "ranks": self.ranks,
            "transport": self.transport,
            "cores": runtime.usable_cores(),
            "oversubscribed": self.launch.oversubscribed,
            "launcher": " ".join(self.launch.command),
            "nodes": self.nodes or 1,
            "emulated": self.nodes is not None,
        }
        if self.launch.placement:
            pl = self.launch.placement
            d.update(link=pl["link"], map_by=pl["map_by"], ranks_per_node=pl["ranks_per_node"],
                     node_of_rank=pl["node_of_rank"], shaping=pl["shaping"])
        if self.launcher == "slurm":
            d.update(self._slurm_info())
        d.update(self.library)
        return d

    def __repr__(self) -> str:
        state = "broken" if self.broken else "running" if self.client else "stopped"
        over = ", oversubscribed" if self.launch.oversubscribed else ""
        where = f" on {self.nodes} emulated nodes ({self.link})" if self.nodes else ""
        return (f"<MPICluster {self.cluster_id}: {self.ranks} ranks over {self.transport}"
                f"{where}{over} on {runtime.usable_cores()} cores, {state}>")

    def describe(self) -> str:
        """One honest sentence about where the measurements come from.

        Returns
        -------
        str
            The ranks, transport and cores; the emulated nodes and their link (what is
            emulated and what is not); Slurm; and whether the ranks are oversubscribed.
        """
        cores = runtime.usable_cores()
        s = f"{self.ranks} MPI ranks over {self.transport} on {cores} core{'s' * (cores != 1)}"
        if self.nodes:
            s = (f"{self.ranks} MPI ranks on {self.nodes} emulated nodes (network namespaces on "
                 f"this machine, {self.map_by}-mapped) joined by a {self.link} link, "
                 f"sharing {cores} core{'s' * (cores != 1)}")
            if self.fabric is not None:
                s += ("; emulated: " + "; ".join(self.fabric.shaping["applied"])
                      + "; not emulated: " + "; ".join(self.fabric.shaping["not_emulated"]))
        if self.launcher == "slurm":
            s += ", started as Slurm jobs"
        if self.launch.oversubscribed:
            s += (f" (oversubscribed: {self.ranks} ranks share {cores} core{'s' * (cores != 1)}, "
                  "so ranks take turns and timings include waiting for a core)")
        return s

    # -- stop, restart, health (starting: Launchers) -----------------------------------
    def stop(self) -> None:
        """Stop every process of this cluster (controller, mpiexec, engines)."""
        global _current
        self._kill_everything()
        self._cluster = None
        self.broken = "stopped"
        if _current is self:
            _current = None

    def keep_after_exit(self) -> None:
        """Leave this cluster running when this process exits (ipyparallel stops the
        clusters it started at exit otherwise): a later :func:`connect` by its id finds
        it, and :meth:`stop` or ``python -m mpilab.cluster stop`` ends it."""
        if self._cluster is not None:
            self._cluster.shutdown_atexit = False

    def restart(self) -> MPICluster:
        """Kill everything, start afresh with the same settings, re-activate ``%px``.

        Returns
        -------
        MPICluster
            This cluster, running again and made current (:func:`current`).
        """
        t0 = time.perf_counter()
        self.stop()
        self._cold_start()
        _set_current(self)
        self.timings["restart_s"] = time.perf_counter() - t0
        return self

    def healthy(self, timeout: float = 5.0) -> bool:
        """True when every rank answers within `timeout` seconds.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for every rank's answer (default 5).

        Returns
        -------
        bool
            True when all :attr:`ranks` ranks answered in time; False when the cluster is not
            running, is broken, or some rank did not answer.
        """
        if self.client is None or self.view is None or self.broken:
            return False
        try:
            got = self.view.apply_async(_rank_and_host).get(timeout=timeout)
        except Exception:
            return False
        return [r for r, _s, _h, _p in got] == list(range(self.ranks))

    # -- running code ------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self.client is None and self.lazy and not self.broken:
            self.lazy = False
            self.start()
        if self.client is None:
            raise ClusterError("the cluster is not running: call lab.start() (or lab.restart())")
        if self.broken:
            raise ClusterError(f"the cluster is unusable ({self.broken}): call lab.restart()")

    def run(self, func: Callable, *args: Any, timeout: float = DEFAULT_TIMEOUT,
            restart_on_timeout: bool = False, **kwargs: Any) -> list:
        """Call ``func(*args, **kwargs)`` on every rank; return the results by rank.

        Raises :class:`MPITimeout` if some rank has not returned after `timeout`
        seconds (the cluster is then unusable until :meth:`restart`, which happens at
        once with ``restart_on_timeout=True``), :class:`RankError` if `func` raised on
        some rank, :class:`ClusterDied` if an engine died.

        Parameters
        ----------
        func : callable
            The function each rank calls (sent with cloudpickle, so a lambda or a
            function defined in the notebook works).
        *args
            Positional arguments of `func`, the same on every rank.
        timeout : float, optional
            Seconds every rank has to return (default ``DEFAULT_TIMEOUT``, 30).
        restart_on_timeout : bool, optional
            True: restart the cluster at once after a timeout, before raising.
        **kwargs
            Keyword arguments of `func`, the same on every rank.

        Returns
        -------
        list
            What `func` returned on each rank, index = rank.

        Raises
        ------
        ClusterError
            The cluster is not running, or is unusable since an earlier failure.
        MPITimeout, RankError, ClusterDied
            As above.
        """
        self._check_usable()
        ar = self.view.apply_async(func, *args, **kwargs)
        return self._wait(ar, timeout, restart_on_timeout, what=getattr(func, "__name__", "code"),
                          where=lambda frames: _where_in_function(frames, func, args, kwargs))

    def execute(self, code: str, *, timeout: float = DEFAULT_TIMEOUT,
                restart_on_timeout: bool = False, display: bool = True, line_offset: int = 0):
        """Run code text on every rank (what ``%%mpi`` does); show its output by rank.

        On a timeout the busy ranks' lines are named as the notebook numbers them:
        `line_offset` lines stand above the code in its cell (1 for ``%%mpi``'s line).

        Parameters
        ----------
        code : str
            Python source run on every rank, in each engine's namespace.
        timeout : float, optional
            Seconds every rank has to finish (default ``DEFAULT_TIMEOUT``, 30).
        restart_on_timeout : bool, optional
            True: restart the cluster at once after a timeout, before raising.
        display : bool, optional
            True: show each rank's output (stdout, stderr, results) once the code
            has finished (also when it raised).
        line_offset : int, optional
            Lines of the cell above `code`, added to the line numbers a timeout names.

        Returns
        -------
        ipyparallel.AsyncResult
            The finished execution: each rank's output, for display or inspection.

        Raises
        ------
        ClusterError, MPITimeout, RankError, ClusterDied
            As :meth:`run`.
        """
        self._check_usable()
        ar = self.view.execute(code, block=False, silent=False)
        try:
            self._wait(ar, timeout, restart_on_timeout, what="the cell", partial=ar,
                       where=lambda frames: _where_in_cell(frames, code, line_offset))
        finally:
            if display and ar.ready():
                ar.display_outputs()
        return ar

    def _wait(self, ar, timeout, restart_on_timeout, what, partial=None, where=None):
        import ipyparallel as ipp

        deadline = time.monotonic() + timeout
        try:
            # Poll, so a killed engine is noticed within a fraction of a second rather
            # than after the controller's heartbeats give up on it.
            while True:
                try:
                    return ar.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                except ipp.error.TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    dead = self.dead_ranks()
                    if dead:
                        self.broken = "an engine died"
                        raise ClusterDied(
                            f"the engine of rank{'s' * (len(dead) != 1)} {_join(dead)} died, "
                            "and the MPI job with it: call lab.restart()"
                        ) from None
        except ipp.error.TimeoutError:
            msg, pending, finished, frames = self._timeout_report(ar, timeout, what,
                                                                  partial, where)
            self.broken = f"{what} timed out"
            if restart_on_timeout:
                self.restart()
                msg += "The MPI job was restarted, so the next cell starts clean."
            else:
                msg += ("An MPI job cannot be interrupted rank by rank: call lab.restart() "
                        "to start the engines afresh.")
            raise MPITimeout(msg, pending, finished, frames) from None
        except ipp.error.CompositeError as exc:
            died = [e for e in exc.elist if e[0] in ("EngineError", "UnmetDependency")]
            if died:
                self.broken = "an engine died"
                raise ClusterDied(
                    "an engine died, and the MPI job with it: call lab.restart()"
                ) from None
            errors = {}
            for ename, evalue, _tb, info in exc.elist:
                eid = info.get("engine_id") if isinstance(info, dict) else None
                rank = (self.rank_ids[self.view.targets.index(eid)]
                        if eid in self.view.targets else -1)
                errors[rank] = (ename, evalue)
            first = min(errors)
            raise RankError(
                f"{what} raised on rank{'s' * (len(errors) != 1)} {_join(sorted(errors))}; "
                f"rank {first}: {errors[first][0]}: {errors[first][1]}", errors
            ) from None
        except ipp.error.EngineError:
            self.broken = "an engine died"
            raise ClusterDied("an engine died, and the MPI job with it: call lab.restart()") from None



def _set_current(c: MPICluster) -> None:
    global _current
    _current = c


def start_engines_on_first_use(on: bool = True) -> None:
    """From now on in this process, :func:`start` leaves a cluster's engines to start when
    code first runs on them (the student's kernel at autograde time).

    :mod:`mpilab.autograder.student` calls this when it is imported in the student's
    kernel: this package, below the grading layer, never imports it.

    Parameters
    ----------
    on : bool
        False: :func:`start` starts the engines at once again (the default).
    """
    _ON_FIRST_USE[0] = bool(on)


def current() -> MPICluster | None:
    """The cluster this process started or connected to last, if any.

    Returns
    -------
    MPICluster or None
        That cluster; None when none was started or connected to, or it was stopped.
    """
    return _current


def start(ranks: int = 4, transport: str = "shm", *, cluster_id: str | None = None,
          start_timeout: float = 60.0, nodes: int | None = None, link: str = "fast-ethernet",
          map_by: str = "node", launcher: str = "local", partition: str | None = None,
          time_limit: str | None = None, sbatch_args: Sequence[str] = ()) -> MPICluster:
    """Start (or reconnect to) this notebook's cluster of `ranks` MPI engines.

    Calling it again with the same settings returns the running cluster at once;
    with other settings it replaces it. With `nodes`, the ranks run on that many
    emulated nodes joined by `link`; with ``launcher="slurm"`` the controller and the
    engines are Slurm jobs (see :class:`MPICluster`).

    Parameters
    ----------
    ranks : int, optional
        Number of engines, i.e. MPI ranks (default 4). More than the cores works,
        oversubscribed.
    transport : {"shm", "tcp"}, optional
        Shared memory between the ranks of a host, or TCP over loopback.
    cluster_id : str, optional
        Defaults to :func:`default_cluster_id` (one cluster per notebook).
    start_timeout : float, optional
        Seconds to wait for all engines to register (default 60).
    nodes : int, optional
        Spread the ranks over this many emulated nodes (:mod:`mpilab.netlab`). None:
        this host.
    link : str, optional
        The emulated nodes' link profile (default ``"fast-ethernet"``); only with `nodes`.
    map_by : {"node", "slot"}, optional
        Ranks round-robin over the nodes, or node0 filled first; only with `nodes`.
    launcher : {"local", "slurm"}, optional
        Start the processes on this host, or as Slurm batch jobs.
    partition, time_limit : str, optional
        Slurm only: ``sbatch --partition`` and ``--time``.
    sbatch_args : sequence of str, optional
        Slurm only: more ``sbatch`` options.

    Returns
    -------
    MPICluster
        The running cluster, made current (:func:`current`). After
        :func:`start_engines_on_first_use`, its engines start at first use instead.
    """
    global _current
    cid = cluster_id or default_cluster_id()
    slurm = (launcher, partition, time_limit, [str(a) for a in sbatch_args])
    same = (cid, ranks, transport, nodes, link if nodes else None, map_by if nodes else None, slurm)
    if _current is not None and _current.client is not None and not _current.broken and (
            _current.cluster_id, _current.ranks, _current.transport, _current.nodes,
            _current.link if _current.nodes else None,
            _current.map_by if _current.nodes else None,
            (_current.launcher, _current.partition, _current.time_limit,
             _current.sbatch_args)) == same:
        if _current.healthy(timeout=5):
            return _current
    if _current is not None and _current.cluster_id == cid:
        _current.stop()
    c = MPICluster(ranks, transport, cid, start_timeout=start_timeout, nodes=nodes, link=link,
                   map_by=map_by, launcher=launcher, partition=partition,
                   time_limit=time_limit, sbatch_args=sbatch_args)
    if _ON_FIRST_USE[0]:
        # At autograde time the tests run elsewhere (mpilab.autograder.isolated): the
        # notebook's own engines start only if one of its cells uses them.
        c.lazy = True
    else:
        c.start()
    _current = c
    return c


def connect(cluster_id: str, timeout: float = 10.0) -> MPICluster:
    """Connect to a cluster another process started (e.g. ``python -m mpilab.cluster start``).

    Parameters
    ----------
    cluster_id : str
        The id the cluster was started with (``mpilab-...``).
    timeout : float, optional
        Seconds the engines have to answer (default 10); a cluster that does not answer
        in time is stopped.

    Returns
    -------
    MPICluster
        The cluster, connected and made current (:func:`current`).

    Raises
    ------
    ClusterError
        No cluster of that id was started, or it does not answer.
    """
    global _current
    from IPython.paths import get_ipython_dir

    meta = Path(get_ipython_dir()) / "profile_default" / "security" / f"mpilab-{cluster_id}.json"
    try:
        settings = json.loads(meta.read_text())["settings"]
    except (OSError, ValueError, KeyError):
        raise ClusterError(f"no running mpilab cluster {cluster_id!r}") from None
    c = MPICluster(settings["n"], settings["transport"], cluster_id,  # "n": the ranks
                   nodes=settings.get("nodes"), link=settings.get("link", "fast-ethernet"),
                   map_by=settings.get("map_by", "node"),
                   launcher=settings.get("launcher", "local"),
                   partition=settings.get("partition"), time_limit=settings.get("time_limit"),
                   sbatch_args=settings.get("sbatch_args", ()))
    if not c._reconnect(timeout=timeout):
        raise ClusterError(f"cluster {cluster_id!r} does not answer; start it again")
    _current = c
    return c

