"""How a cluster's processes start and stop: on this host or on emulated nodes
(:mod:`mpilab.netlab`), reconnecting to a cluster that already runs, and ending every
process of it (Slurm's jobs: :mod:`.slurm`).

:class:`Launchers` is that part of :class:`~mpilab.cluster.MPICluster`; the engines always
start as one MPI job under :func:`mpilab.runtime.launch`'s command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Self

from .. import netlab, runtime
from .diagnostics import _engine_stack_file, kill_cluster_processes
from .errors import ClusterError

# Defined on every engine, so cells run with execute() or %%mpi can use them at once.
_PRELUDE = (
    "from mpi4py import MPI\n"
    "import numpy as np\n"
    "comm = MPI.COMM_WORLD\n"
    "rank, size = comm.Get_rank(), comm.Get_size()\n"
)


@contextlib.contextmanager
def _no_progress_bar():
    """start_and_connect without its progress bar: in a notebook it draws one per start,
    saved at "0/4" (lecture 07 showed nine). ipyparallel reads IPP_NONINTERACTIVE once, at
    import, into ``ipyparallel._NONINTERACTIVE``, which its wait for engines consults; a
    lecture test fails if a bar comes back."""
    import ipyparallel as ipp

    old = getattr(ipp, "_NONINTERACTIVE", None)
    ipp._NONINTERACTIVE = True
    try:
        yield
    finally:
        ipp._NONINTERACTIVE = old


def _rank_and_host():
    import os
    import socket

    from mpi4py import MPI

    return (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), socket.gethostname(),
            os.getpid())


class Launchers:
    """Starting, reconnecting and stopping a cluster's processes (a part of MPICluster)."""

    # -- files -------------------------------------------------------------------------
    def _profile_dir(self) -> Path:
        from IPython.paths import get_ipython_dir

        return Path(get_ipython_dir()) / "profile_default"

    def _meta_path(self) -> Path:
        return self._profile_dir() / "security" / f"mpilab-{self.cluster_id}.json"

    def _settings(self) -> dict:
        # "n" is the saved file's key for the ranks (connect reads it): kept, so that a
        # cluster an earlier version started is still found and reconnected
        if self.nodes:  # the command names the fabric, which a restart replaces
            return {"n": self.ranks, "transport": self.transport, "nodes": self.nodes,
                    "link": self.link, "map_by": self.map_by, "env": self.launch.env}
        settings = {"n": self.ranks, "transport": self.transport,
                    "command": list(self.launch.command), "env": self.launch.env}
        if self.launcher == "slurm":
            settings.update(launcher="slurm", partition=self.partition,
                            time_limit=self.time_limit, sbatch_args=self.sbatch_args)
        return settings

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Self:
        """Connect to this cluster if it already runs with the same settings, else start it.

        Returns
        -------
        MPICluster
            This cluster, running (the time it took is in ``timings``).
        """
        t0 = time.perf_counter()
        if self.client is not None and not self.broken and self.healthy(timeout=5):
            return self
        if self._reconnect():
            self.timings["reconnect_s"] = time.perf_counter() - t0
            return self
        self._cold_start()
        self.timings["start_s"] = time.perf_counter() - t0
        return self

    def _reconnect(self, timeout: float = 5) -> bool:
        """Connect to this cluster's running engines (saved by an earlier start under the
        same id and settings); False, with everything of it killed, where they do not
        answer within `timeout` seconds."""
        import ipyparallel as ipp

        meta = self._meta_path()
        try:
            saved = json.loads(meta.read_text())
        except (OSError, ValueError):
            return False
        if saved.get("settings") != self._settings():
            self._kill_everything()
            return False
        try:
            if self.nodes:
                self._use_fabric(netlab.load(saved["fabric"]))
            cl = ipp.Cluster.from_file(cluster_id=self.cluster_id)
            self._cluster = cl
            self.client = cl.connect_client_sync()
            self._wire_up(timeout=timeout)
        except Exception:
            self._kill_everything()
            return False
        return True

    def _use_fabric(self, fabric) -> None:
        """Run on `fabric`'s emulated nodes: the launch becomes the fabric's, for the same
        ranks and transport (the one place a started cluster's launch is rebuilt)."""
        self.fabric = fabric
        self.launch = fabric.launch(self.ranks, map_by=self.map_by, transport=self.transport,
                                    thread_level="funneled")

    def _cold_start(self) -> None:
        import ipyparallel as ipp

        self._kill_everything()  # leftovers of an earlier run under the same id
        controller_ip = "127.0.0.1"
        if self.nodes:
            try:
                fabric = netlab.up(self.nodes, self.link, persistent=self.persistent_nodes)
            except netlab.NetlabUnavailable as exc:
                raise ClusterError(f"no emulated nodes here: {exc}") from None
            self._use_fabric(fabric)
            controller_ip = self.fabric.switch_address  # the engines reach it across
        for attempt in (1, 2):
            cl = ipp.Cluster(engines="mpi", n=self.ranks, cluster_id=self.cluster_id,
                             controller_ip=controller_ip, engine_timeout=self.start_timeout,
                             log_level=40, shutdown_atexit=True,
                             # Engines count as registered at the next heartbeat: the default
                             # 3 s period made a cold start 6.9 s here, 500 ms makes it 2.7 s.
                             controller_args=["--HeartMonitor.period=500"])
            # Cluster(mpi_args=...) is ignored (field notes); the launcher's config is not.
            launcher = cl.config.MPIEngineSetLauncher
            launcher.mpi_cmd = [self.launch.exe]
            launcher.mpi_args = list(self.launch.args)
            launcher.environment = dict(self.launch.env)
            # No nanny: it only serves per-engine signals (useless under MPI) and lingers
            # for up to a minute after a stop.
            launcher.engine_args = ["--IPEngine.enable_nanny=False"]
            if self.launcher == "slurm":
                self._use_slurm(cl)
            self._cluster = cl
            try:
                with runtime.without_mpi_singleton_env(), _no_progress_bar():
                    self.client = cl.start_and_connect_sync(activate=False)
                self._wire_up(timeout=self.start_timeout)
            except Exception as exc:
                log = self._engine_log_tail()
                self._kill_everything()
                # A launcher that exits while its engines start gets one more try: Open
                # MPI 5's prterun did so (exit 213, no output) once in a CI run of the
                # grading tests on a busy 2-core machine, not in ten restarts on an idle
                # one; a start right after works.
                if attempt == 1 and "Engine set stopped" in str(exc) and not self.nodes:
                    self.timings["start_retried_after"] = f"{type(exc).__name__}: {exc}"
                    time.sleep(0.5)
                    continue
                raise ClusterError(
                    f"the {self.ranks} MPI engines did not start ({type(exc).__name__}: {exc}).\n"
                    f"Launcher: {' '.join(self.launch.command)}\n{log}"
                ) from exc
            break
        meta = self._meta_path()
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"settings": self._settings(), "pid": os.getpid(),
                                    "fabric": self.fabric.id if self.fabric else None}))

    def _wire_up(self, timeout: float) -> None:
        """Order engines by rank, check the MPI job is whole, activate %px."""
        rc = self.client
        rc.wait_for_engines(self.ranks, timeout=timeout, interactive=False)  # no progress bar
        rc[:].use_cloudpickle()
        all_ids = rc.ids
        got = rc[all_ids].apply_async(_rank_and_host).get(timeout=timeout)
        by_rank = sorted(zip(got, all_ids, strict=False))
        ranks = [r for (r, _size, _h, _pid), _eid in by_rank]
        sizes = {size for (_r, size, _h, _pid), _eid in by_rank}
        if ranks != list(range(self.ranks)) or sizes != {self.ranks}:
            raise ClusterError(f"engines are not one MPI job of {self.ranks} ranks: ranks {ranks}, "
                               f"sizes {sorted(sizes)}")
        self.rank_ids = ranks
        here = socket.gethostname()
        self.hosts = [host for (_r, _s, host, _pid), _eid in by_rank]
        # emulated nodes share this machine's process ids
        self.pids = [pid if host == here or self.fabric else 0
                     for (_r, _s, host, pid), _eid in by_rank]
        self.view = rc[[eid for _r, eid in by_rank]]
        self.view.block = True
        # Ask the engines, not this process: importing mpi4py.MPI here would start MPI
        # in the notebook's kernel.
        self.library = rc[by_rank[0][1]].apply_async(runtime.library_info).get(timeout=timeout)
        # not execute(block=True): after the result it waits, without a timeout, for the
        # request's output on the IOPub channel (ipyparallel's wait_for_output), and
        # a message lost there hung a restart for good (a class of two students on a
        # loaded 2-core machine, lab 00's deadlock demo: the result was in, the engines idle)
        self.view.execute(_PRELUDE, block=False, silent=True).get(timeout=timeout)
        folder = self.stack_folder()
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self.view.apply_async(_engine_stack_file, str(folder)).get(timeout=timeout)
        except Exception:  # noqa: BLE001 - stacks are an aid to the timeout message only
            pass
        self.broken = None
        try:
            from IPython import get_ipython

            ip = get_ipython()
            if ip is not None:
                self.view.activate()  # %px, %%px, %autopx on this cluster
                # %%mpi, as an IPython extension: loaded once, by its name
                ip.extension_manager.load_extension("mpilab.magics")
        except ImportError:  # pragma: no cover
            pass

    def _kill_everything(self) -> int:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
        self.client = None
        self.view = None
        if self._cluster is not None:
            # Forget the launchers: the processes are killed below, by id.
            self._cluster.controller = None
            self._cluster.engines = {}
            self._cluster.shutdown_atexit = False
        cancelled = self._cancel_slurm_jobs()
        n = kill_cluster_processes(self.cluster_id)
        if cancelled:
            self._wait_slurm_jobs_gone(cancelled)
        if self.fabric is not None:
            self.fabric.down()  # with anything still running on its nodes
            self.fabric = None
        else:
            self._remove_saved_fabric()
        for f in (self._meta_path(),
                  self._profile_dir() / "security" / f"cluster-{self.cluster_id}.json"):
            f.unlink(missing_ok=True)
        for f in (self._profile_dir() / "security").glob(f"ipcontroller-{self.cluster_id}-*.json"):
            f.unlink(missing_ok=True)
        shutil.rmtree(self.stack_folder(), ignore_errors=True)
        return n

    def _remove_saved_fabric(self) -> None:
        """The emulated nodes a run of this cluster in another process left up."""
        try:
            fid = json.loads(self._meta_path().read_text()).get("fabric")
        except (OSError, ValueError):
            return
        if fid:
            try:
                netlab.load(fid).down()
            except KeyError:
                pass
