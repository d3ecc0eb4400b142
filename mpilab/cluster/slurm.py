"""The Slurm launcher (``launcher="slurm"``): the controller and the engines as two batch
jobs, submitted through ipyparallel's Slurm launchers, and cancelled by name on a stop.

:class:`SlurmJobs` is that part of :class:`~mpilab.cluster.MPICluster` (docs/cluster.md).
"""

from __future__ import annotations

import getpass
import json
import shlex
import shutil
import subprocess
import time
import warnings

from .errors import ClusterError


class SlurmJobs:
    """Submitting, describing and cancelling a cluster's Slurm jobs (a part of MPICluster)."""

    def _use_slurm(self, cl) -> None:
        """Have `cl` submit its controller and its engines as Slurm batch jobs."""
        from ipyparallel.cluster.launcher import SlurmControllerLauncher, SlurmEngineSetLauncher

        if not shutil.which("sbatch"):
            raise ClusterError("launcher='slurm' needs Slurm's sbatch, which is not on PATH "
                               "(on one host as root: scripts/slurm-local.sh start)")
        cl.controller_launcher_class = SlurmControllerLauncher
        cl.engine_launcher_class = SlurmEngineSetLauncher
        # The controller's node is known only once its job runs: it listens on every
        # interface, and engines and this client find it by its host name.
        cl.controller_ip = "*"
        cpus = _partition_cpus(self.partition)
        self.slurm_overcommit = (cpus is not None and self.ranks > cpus and not
                                 {"-O", "--overcommit"} & set(self.sbatch_args))

        def script(name: str, lines: list[str]) -> str:
            # ipyparallel fills {n}, {cluster_id}, {output_file}, {program_and_args}
            opts = [f"--partition={self.partition}"] * bool(self.partition)
            opts += [f"--time={self.time_limit}"] * bool(self.time_limit)
            opts += self.sbatch_args
            user = "\n".join(f"#SBATCH {o}" for o in opts).replace("{", "{{").replace("}", "}}")
            return "\n".join(["#!/bin/sh", "#SBATCH --export=ALL",
                              f"#SBATCH --job-name={name}-{{cluster_id}}",
                              "#SBATCH --output={output_file}", user, *lines, ""])

        batch_dir = self._profile_dir() / "slurm"
        batch_dir.mkdir(parents=True, exist_ok=True)
        ctl = cl.config.SlurmControllerLauncher
        ctl.batch_template = script("ipcontroller", ["#SBATCH --ntasks=1",
                                                     "exec {program_and_args}"])
        ctl.batch_file_name = str(batch_dir / f"{self.cluster_id}-controller.sbatch")
        ctl.connection_info_timeout = self.start_timeout  # the job may wait in the queue
        eng = cl.config.SlurmEngineSetLauncher
        # The engines are one MPI job: the same mpiexec, options and environment (root,
        # oversubscription, transport) as on this host, inside the job's allocation.
        mpiexec = shlex.join(self.launch.command).replace("{", "{{").replace("}", "}}")
        eng.batch_template = script("ipengine", [
            "#SBATCH --ntasks={n}", *["#SBATCH --overcommit"] * self.slurm_overcommit,
            f"exec {mpiexec} {{program_and_args}}"])
        eng.batch_file_name = str(batch_dir / f"{self.cluster_id}-engines.sbatch")
        eng.environment = dict(self.launch.env)
        eng.engine_args = ["--mpi", "--IPEngine.enable_nanny=False"]

    def _slurm_info(self) -> dict:
        ids = {"controller": "", "engines": []}
        if self._cluster is not None:
            ids["controller"] = getattr(self._cluster.controller, "job_id", "") or ""
            ids["engines"] = [es.job_id for es in self._cluster.engines.values()
                              if getattr(es, "job_id", "")]
        return {"launcher": "slurm", "mpiexec": " ".join(self.launch.command),
                "slurm_jobs": ids, "partition": self.partition or "",
                "slurm_overcommit": self.slurm_overcommit}

    def _slurm_job_names(self) -> str:
        return f"ipcontroller-{self.cluster_id},ipengine-{self.cluster_id}"

    def _uses_slurm(self) -> bool:
        if self.launcher == "slurm":
            return True
        try:  # a run of this cluster id that another process started
            return json.loads(self._meta_path().read_text())["settings"].get("launcher") == "slurm"
        except (OSError, ValueError, KeyError, AttributeError):
            return False

    def _slurm_jobs(self) -> list[str]:
        """Ids of this cluster's jobs that Slurm still lists (pending, running, ending)."""
        out = _slurm(["squeue", "-h", "--user", getpass.getuser(),
                      "--name", self._slurm_job_names(), "-o", "%i"])
        return out.split()

    def _cancel_slurm_jobs(self) -> list[str]:
        """scancel this cluster's jobs (found by name, so an earlier run's too)."""
        if not self._uses_slurm():
            return []
        try:
            ids = self._slurm_jobs()
            if ids:
                _slurm(["scancel", *ids])
        except ClusterError as exc:
            warnings.warn(f"could not cancel this cluster's Slurm jobs: {exc}", stacklevel=3)
            return []
        for f in (self._profile_dir() / "slurm").glob(f"{self.cluster_id}-*.sbatch"):
            f.unlink(missing_ok=True)
        return ids

    def _wait_slurm_jobs_gone(self, ids: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        try:
            while (left := self._slurm_jobs()) and time.monotonic() < deadline:
                time.sleep(0.2)
        except ClusterError as exc:
            left = [f"unknown ({exc})"]
        if left:
            warnings.warn(f"Slurm still lists jobs {', '.join(left)} of {self.cluster_id} "
                          f"{timeout:g} s after scancel", stacklevel=3)


def _slurm(cmd: list[str], timeout: float = 30.0) -> str:
    """Output of a Slurm command; a ClusterError with its message when it fails."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{cmd[0]}: {exc}") from None
    if res.returncode:
        raise ClusterError(f"{shlex.join(cmd)}: {res.stderr.strip() or res.returncode}")
    return res.stdout


def _partition_cpus(partition: str | None) -> int | None:
    """CPUs of a Slurm partition (the default one when None); None when unknown."""
    try:
        out = _slurm(["sinfo", "-h", "-o", "%P %C", *(["-p", partition] if partition else [])])
    except ClusterError:
        return None
    for line in out.splitlines():
        name, cpus = line.split()
        if partition or name.endswith("*"):  # sinfo marks the default partition with *
            return int(cpus.rsplit("/", 1)[-1])  # allocated/idle/other/total
    return None

