"""One way to start an MPI job and one way to end it.

:func:`mpilab.runtime.launch` says *how* to start ranks on this machine (launcher,
options, the environment: root flags, oversubscription, transport); this module starts
them and makes sure they end. Everything in the course that runs MPI processes goes
through here: the benchmarks (``python -m mpilab.bench``), the Fortran/coarray programs
(:mod:`mpilab.coarrays`), the tuner's jobs (:mod:`mpilab.collectives`), the tests'
``mpirun`` and the ipyparallel cluster (:mod:`mpilab.cluster`, whose engines
ipyparallel starts under the same launcher and which ends them with :func:`end`).
The one exception is the autograder's pool of ranks (:mod:`mpilab.autograder.pool`): it
starts the same launch inside a sandbox, whose PID namespace and cgroup end everything in
it at once (:mod:`mpilab.autograder.sandbox`).

The kill policy, the same on every path:

1. every process of a job carries a tag in its environment (``MPILAB_JOB=<id>`` for a
   :class:`Job`, ``IPP_CLUSTER_ID`` for a cluster); ``mpiexec`` passes it to its ranks
   and they to their children. That is how the ranks are found: Open MPI puts each rank
   in a process group of its own, so killing the launcher's group does not reach them,
   and a child that left the session (``setsid``) is reached by nothing else;
2. the launcher's process group gets SIGKILL (nothing new starts after that), then every
   tagged process; the call waits until they are gone (SIGKILL is asynchronous);
3. shared-memory segments that no live process maps any more are removed
   (:func:`mpilab.runtime.remove_stale_shm_segments`), so a killed job leaves no
   ``/dev/shm`` file behind, and so are Open MPI's session folders in /tmp whose
   launcher has ended (:func:`mpilab.runtime.remove_stale_session_dirs`: a killed
   launcher leaves its PMIx store there, megabytes a job) and MPICH's topology files in
   /tmp once no hydra process is left (:func:`mpilab.runtime.remove_stale_hydra_files`).

A job that ends by itself is ended the same way, since a rank that aborted can leave its
peers running for a moment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import runtime

TAG = "MPILAB_JOB"


class JobFailed(RuntimeError):
    """The job ended with a non-zero exit status."""

    def __init__(self, message: str, argv: Sequence[str], returncode: int, stdout: str,
                 stderr: str):
        super().__init__(message)
        self.argv, self.returncode = list(argv), returncode
        self.stdout, self.stderr = stdout, stderr


class JobTimeout(TimeoutError, RuntimeError):
    """The job did not finish in time; it was killed (a TimeoutError and a RuntimeError)."""

    def __init__(self, message: str, stdout: str, stderr: str):
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


def tagged(var: str, match: str | Callable[[str], bool]) -> list:
    """Live processes whose environment has `var` equal to `match` (or passing it).

    Only processes this user may read are seen; this process never is.

    Parameters
    ----------
    var : str
        The environment variable: :data:`TAG` (``MPILAB_JOB``) for a :class:`Job`,
        ``IPP_CLUSTER_ID`` for a cluster's processes.
    match : str or callable
        The value it must have, or a test of the value (``match(value) -> bool``; an unset
        or empty variable never matches).

    Returns
    -------
    list of psutil.Process
        The matching processes, in no particular order.
    """
    import psutil

    ok = match if callable(match) else (lambda v: v == match)
    me, found = os.getpid(), []
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            value = p.environ().get(var)
        except (psutil.Error, OSError):
            continue
        if value and ok(value):
            found.append(p)
    return found


def end(processes: Sequence, *, gentle: Callable[[Any], bool] = lambda p: False,
        grace: float = 2.0, wait: float = 10.0) -> int:
    """End `processes` (psutil processes); how many there were. Then remove stale segments.

    Processes for which `gentle(p)` is true get SIGTERM first and SIGKILL after `grace`
    seconds (an ``mpiexec`` that may still remove its session files); the rest get
    SIGKILL at once. Returns after every one is gone or `wait` seconds have passed.

    Parameters
    ----------
    processes : sequence of psutil.Process
        The processes to end (e.g. from :func:`tagged`); those already gone are skipped.
    gentle : callable, optional
        ``gentle(p) -> bool``: which processes get SIGTERM first (default: none).
    grace : float, optional
        Seconds a gently ended process has before SIGKILL (default 2).
    wait : float, optional
        Seconds to wait, at most, for all of them to be gone (default 10).

    Returns
    -------
    int
        How many processes were given, ``len(processes)``.
    """
    import psutil

    procs = list(processes)
    soft = []
    for p in procs:
        try:
            if gentle(p):
                p.terminate()
                soft.append(p)
            else:
                p.kill()
        except psutil.Error:
            pass
    if soft:
        _, alive = psutil.wait_procs(soft, timeout=grace)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
    _wait_gone(procs, wait)
    runtime.remove_stale_shm_segments()
    runtime.remove_stale_session_dirs()
    runtime.remove_stale_hydra_files()
    return len(procs)


def reap_orphans() -> int:
    """End the jobs whose starting process is gone; how many processes that ended.

    A process that starts a job and is then killed itself (SIGKILL, a crashed kernel)
    cannot end it; its job id starts with its process id, so the next job started on
    this machine finds such a job and ends it (:class:`Job` calls this on every start).

    Returns
    -------
    int
        How many processes were ended (0 if no job was orphaned). Jobs started in another
        PID namespace are left alone.
    """
    import psutil

    def orphan(job_id: str) -> bool:
        owner = job_id.partition("-")[0]
        return owner.isdigit() and not psutil.pid_exists(int(owner))

    # A job id holds its owner's pid as its own PID namespace numbers it: a job started in
    # another namespace (a grading sandbox, a container, a chroot'd test run) has an owner
    # this process cannot see, alive or not, so it is not ours to judge.
    found = [p for p in tagged(TAG, orphan) if _pid_namespace(p.pid) == _pid_namespace("self")]
    return end(found) if found else 0


def _pid_namespace(pid: int | str) -> str | None:
    """The PID namespace of process `pid` (``"self"``: this one), None if unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _wait_gone(procs: Sequence, wait: float) -> None:
    """Until every process is gone or a zombie nobody reaps (not ours to wait for)."""
    import psutil

    deadline = time.monotonic() + wait
    left = list(procs)
    while left and time.monotonic() < deadline:
        _, left = psutil.wait_procs(left, timeout=0.1)
        left = [p for p in left if _running(p)]


def _running(p) -> bool:
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Job:
    """An MPI job started in a session of its own and tagged: :meth:`kill` ends it all.

    >>> with Job(runtime.launch(2), ["./a.out"]) as job:      # doctest: +SKIP
    ...     out = job.wait(timeout=60)                        # CompletedProcess

    Leaving the ``with`` block (or :meth:`wait` returning, failing or timing out) ends
    every process of the job and removes its stale shared-memory segments.
    """

    def __init__(self, launch: runtime.Launch, program: Sequence[str], *,
                 mpi_args: Sequence[str] = (), env: dict | None = None,
                 cwd: str | os.PathLike | None = None, capture: bool = True):
        reap_orphans()
        self.launch = launch
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.program = [str(a) for a in program]
        self.argv = [*launch.command, *mpi_args, *self.program]
        full = launch.full_env()
        full.update(env or {})
        full[TAG] = self.id
        pipe = subprocess.PIPE if capture else None
        self.proc = subprocess.Popen(self.argv, env=full, cwd=cwd, stdout=pipe, stderr=pipe,
                                     stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    @property
    def name(self) -> str:
        """The program, short: ``wave_caf``, ``python -m mpilab.tuning``, ``python x.py``."""
        if not self.program:
            return "?"
        words, rest = [os.path.basename(self.program[0])], self.program[1:]
        if rest[:1] == ["-m"]:
            words += rest[:2]
        elif rest[:1] == ["-c"]:
            words += ["-c"]
        elif rest and rest[0].endswith(".py"):
            words.append(os.path.basename(rest[0]))
        return " ".join(words)

    def processes(self) -> list:
        """The job's live processes (launcher, daemons, ranks).

        Returns
        -------
        list of psutil.Process
            The processes tagged with this job's id (see :func:`tagged`).
        """
        return tagged(TAG, self.id)

    def kill(self) -> int:
        """End every process of the job (see the module's kill policy); how many were found.

        Returns
        -------
        int
            How many tagged processes were found and ended, after the launcher's process
            group was killed (0 when the job had already ended).
        """
        try:  # first the launcher's group: nothing new is started after this
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        n = end(self.processes())  # then the ranks (own groups) and whatever they started
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed above
            pass
        return n

    def wait(self, timeout: float, *, check: bool = True) -> subprocess.CompletedProcess:
        """Wait for the job to end; its output. Ends all its processes in every case.

        Raises :class:`JobTimeout` after `timeout` seconds (the job is killed first) and,
        with `check`, :class:`JobFailed` if it exited with a non-zero status.

        Parameters
        ----------
        timeout : float
            Seconds to wait for the job before it is killed.
        check : bool, optional
            Raise :class:`JobFailed` on a non-zero exit status (default True).

        Returns
        -------
        subprocess.CompletedProcess
            The job's ``argv``, exit status and output (``stdout``, ``stderr`` as text;
            empty strings where the job was started with ``capture=False``).

        Raises
        ------
        JobTimeout
            The job ran past `timeout` (it has been killed).
        JobFailed
            With `check`, the job exited with a non-zero status.
        """
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            raise JobTimeout(f"{self.name} on {self.launch.ranks} ranks did not finish in {timeout:g} s (killed)",
                             out or "", err or "") from None
        except BaseException:
            self.kill()
            raise
        self.kill()  # a rank that aborted may leave its peers behind for a moment
        res = subprocess.CompletedProcess(self.argv, self.proc.returncode, out or "", err or "")
        if check and res.returncode != 0:
            raise JobFailed(f"{' '.join(self.argv)} failed (exit {res.returncode}):\n"
                            f"{(res.stderr or res.stdout)[-3000:]}",
                            self.argv, res.returncode, res.stdout, res.stderr)
        return res


#: What a launcher prints when it failed before it started any rank: such a job is run
#: once more (Open MPI 5's prterun, exit 213, seen about once in a hundred starts on a
#: busy 2-core machine; the program never ran, so nothing happens twice).
LAUNCHER_START_FAILURES = ("The PMIx server's listener thread failed to start",)


def launcher_did_not_start(res: subprocess.CompletedProcess) -> bool:
    """Did this job fail in its launcher before any rank started?

    Parameters
    ----------
    res : subprocess.CompletedProcess
        A finished job (from :meth:`Job.wait`).

    Returns
    -------
    bool
        True if it exited with a non-zero status and its output holds one of
        :data:`LAUNCHER_START_FAILURES`: running it again runs nothing twice.
    """
    return res.returncode != 0 and any(s in (res.stderr or "") + (res.stdout or "")
                                       for s in LAUNCHER_START_FAILURES)


def run(launch: runtime.Launch, program: Sequence[str], *, timeout: float,
        check: bool = True, mpi_args: Sequence[str] = (), env: dict | None = None,
        cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run an MPI program to completion under `launch`; its output (see :meth:`Job.wait`).

    A launcher that failed before starting any rank (:data:`LAUNCHER_START_FAILURES`)
    gets one more try.

    Parameters
    ----------
    launch : mpilab.runtime.Launch
        How to start the ranks (:func:`mpilab.runtime.launch`).
    program : sequence of str
        The program and its arguments, run on every rank.
    timeout : float
        Seconds the job may run (each try) before it is killed.
    check : bool, optional
        Raise :class:`JobFailed` on a non-zero exit status (default True).
    mpi_args : sequence of str, optional
        Launcher options placed between ``launch.command`` and the program.
    env : dict, optional
        Environment variables added to ``launch.full_env()``.
    cwd : str or path-like, optional
        The job's working directory (default: this process's).

    Returns
    -------
    subprocess.CompletedProcess
        The last try's ``argv``, exit status, ``stdout`` and ``stderr``.

    Raises
    ------
    JobTimeout, JobFailed
        As :meth:`Job.wait` (the last try's).
    """
    for attempt in (1, 2):
        job = Job(launch, program, mpi_args=mpi_args, env=env, cwd=cwd)
        res = job.wait(timeout, check=False)
        if attempt == 1 and launcher_did_not_start(res):
            time.sleep(0.5)
            continue
        break
    if check and res.returncode != 0:
        raise JobFailed(f"{' '.join(job.argv)} failed (exit {res.returncode}):\n"
                        f"{(res.stderr or res.stdout)[-3000:]}",
                        job.argv, res.returncode, res.stdout, res.stderr)
    return res


def worker_main(worker: Callable[[str, str], Any], module: str,
                argv: Sequence[str] | None = None) -> Any:
    """The ``--worker ARGS.json OUT.json`` entry point of a module :func:`python_worker` runs.

    A module's last lines: ``if __name__ == "__main__": sys.exit(worker_main(_worker,
    "mpilab.halo.k1"))``.

    Parameters
    ----------
    worker : callable
        Called as ``worker(args_path, out_path)`` on every rank.
    module : str
        The module's name, for the usage line.
    argv : sequence of str, optional
        The command line (default ``sys.argv``).

    Returns
    -------
    object
        What `worker` returned (the exit status), or the usage line when the command line
        is not ``--worker ARGS OUT``.
    """
    argv = sys.argv if argv is None else argv
    if len(argv) == 4 and argv[1] == "--worker":
        return worker(argv[2], argv[3])
    return f"usage: python -m {module} --worker ARGS.json OUT.json"


def python_worker(launch: runtime.Launch, module: str, args: dict, timeout: float) -> dict:
    """Run ``python -m <module> --worker ARGS.json OUT.json`` under `launch`; OUT's JSON.

    The module's ``--worker`` entry point runs on every rank and rank 0 writes the JSON.

    Parameters
    ----------
    launch : mpilab.runtime.Launch
        How to start the ranks.
    module : str
        The module to run with ``python -m`` (``"mpilab.halo.k1"``); it must accept
        ``--worker ARGS.json OUT.json``.
    args : dict
        What the worker reads from ARGS.json (JSON-serialisable).
    timeout : float
        Seconds the job may run before it is killed.

    Returns
    -------
    dict
        What rank 0 wrote to OUT.json.

    Raises
    ------
    JobTimeout, JobFailed
        As :func:`run` (always checked).
    """
    with tempfile.TemporaryDirectory(prefix="mpilab-job-") as d:
        a, o = Path(d) / "args.json", Path(d) / "out.json"
        a.write_text(json.dumps(args))
        run(launch, [sys.executable, "-m", module, "--worker", str(a), str(o)],
            timeout=timeout)
        return json.loads(o.read_text())
