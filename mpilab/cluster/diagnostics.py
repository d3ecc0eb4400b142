"""Where a cluster's ranks are and what its processes are: stack dumps, the engines' log,
the line a busy rank was at, and finding or killing every process of a cluster.

:class:`Diagnostics` is the part of :class:`~mpilab.cluster.MPICluster` that asks the
engines where they are (SIGUSR1 makes each write its Python stack, without stopping it);
the functions below turn frames into the line of a notebook's cell or function that a
timeout message names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from .. import jobs, sources

# processes


def cluster_processes(cluster_id: str | None = None) -> list:
    """Live processes of a cluster (all mpilab clusters when `cluster_id` is None).

    Every process ipyparallel starts for a cluster (controller, mpiexec, engines)
    carries ``IPP_CLUSTER_ID`` in its environment; that is what is matched
    (:func:`mpilab.jobs.tagged`).

    Parameters
    ----------
    cluster_id : str, optional
        The cluster's id; None: every cluster whose id starts with ``mpilab-``.

    Returns
    -------
    list of psutil.Process
        The processes found (only this user's, never this process).
    """
    return jobs.tagged("IPP_CLUSTER_ID",
                       cluster_id if cluster_id else (lambda cid: cid.startswith("mpilab-")))


def kill_cluster_processes(cluster_id: str | None = None, grace: float = 2.0) -> int:
    """Stop every process of a cluster at once; returns how many were found.

    The kill policy of every MPI job (:func:`mpilab.jobs.end`): engines get SIGKILL (they
    hold nothing worth saving, and a graceful engine shutdown takes ~3 s); the
    controller and mpiexec get SIGTERM, so Open MPI still removes its session files, and
    SIGKILL after `grace` seconds; then stale shared-memory segments are removed.
    Safe to call when nothing runs.

    Parameters
    ----------
    cluster_id : str, optional
        The cluster's id; None: every mpilab cluster of this user.
    grace : float, optional
        Seconds between SIGTERM and SIGKILL for the controller and mpiexec (default 2).

    Returns
    -------
    int
        How many processes were found (and ended).
    """

    def gentle(p) -> bool:
        return "ipyparallel.engine" not in " ".join(p.cmdline())

    return jobs.end(cluster_processes(cluster_id), gentle=gentle, grace=grace)



# ---------------------------------------------------------------------------------------
# stack dumps


_STACK_FILE = None  # (on an engine) where SIGUSR1 makes faulthandler write the stack


def _engine_stack_file(folder: str) -> bool:
    """On an engine: on SIGUSR1, write this rank's Python stack to folder/stack.<rank>.

    Opened for appending, so a dump goes to the start of a file the client emptied. One
    registration per engine: the grader's checks use it too (a second ``register`` and
    its ``unregister`` would leave SIGUSR1's default action, which ends the engine).
    """
    global _STACK_FILE
    import faulthandler
    import signal

    from mpi4py import MPI

    if _STACK_FILE is not None:
        return True
    try:
        f = open(os.path.join(folder, f"stack.{MPI.COMM_WORLD.Get_rank()}"), "a")  # noqa: SIM115
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=False, chain=False)
    except (OSError, ValueError, RuntimeError):
        return False  # another host's engine, or no signals: no stacks, everything else works
    _STACK_FILE = f
    return True


class Diagnostics:
    """Stack dumps, the launcher's output and dead engines (a part of MPICluster)."""

    def stack_folder(self) -> Path:
        """Where each engine writes its Python stack when asked (:meth:`stacks`).

        Returns
        -------
        pathlib.Path
            A folder in the IPython profile's ``security`` folder, one per cluster id;
            rank ``r`` writes ``stack.<r>`` in it.
        """
        return self._profile_dir() / "security" / f"mpilab-{self.cluster_id}-stacks"

    def stacks(self, ranks: Sequence[int], wait: float = 1.0) -> dict[int, str]:
        """The Python stack of each of `ranks` (faulthandler's text, most recent call
        first), asked with SIGUSR1: where a busy rank is, without stopping it. Ranks on
        another host, or that do not answer within `wait` seconds, are left out.

        Parameters
        ----------
        ranks : sequence of int
            The ranks to ask.
        wait : float, optional
            Seconds to wait for the dumps (default 1).

        Returns
        -------
        dict of int to str
            Rank -> its stack dump as faulthandler writes it.
        """
        import signal

        folder = self.stack_folder()
        asked = []
        for r in ranks:
            pid = self.pids[r] if 0 <= r < len(self.pids) else 0
            path = folder / f"stack.{r}"
            if not pid or not path.exists():
                continue
            try:
                os.truncate(path, 0)
                os.kill(pid, signal.SIGUSR1)
                asked.append(r)
            except OSError:
                pass
        got: dict[int, str] = {}
        last: dict[int, str] = {}
        deadline = time.monotonic() + wait
        while asked and time.monotonic() < deadline:
            time.sleep(0.05)
            for r in list(asked):
                try:
                    text = (folder / f"stack.{r}").read_text(errors="replace")
                except OSError:
                    continue
                if "File" in text and text == last.get(r):  # written, and no longer growing
                    got[r] = text
                    asked.remove(r)
                last[r] = text
        for r in asked:  # still writing at the deadline: what is there
            if "File" in last.get(r, ""):
                got[r] = last[r]
        return got

    def _engine_log_tail(self, lines: int = 15) -> str:
        """The last lines of this cluster's newest engine-set log (the launcher's own
        output) and controller log."""
        out = []
        # ipyparallel keeps a stopped launcher's output and removes its file
        for es in list(getattr(self._cluster, "engines", {}).values()):
            try:
                text = (es.get_output() or "").splitlines()[-lines:]
            except Exception:  # noqa: BLE001 - a launcher without output
                text = []
            if text:
                out.append(f"Output of {getattr(es, 'identifier', 'the engines')}:\n"
                           + "\n".join(text))
        logdir = self._profile_dir() / "log"
        for kind in ("ipengine", "ipcontroller"):
            logs = sorted(logdir.glob(f"{kind}*{self.cluster_id}*"),
                          key=lambda p: p.stat().st_mtime)
            if logs:
                text = logs[-1].read_text(errors="replace").splitlines()[-lines:]
                out.append(f"Last lines of {logs[-1]}:\n" + "\n".join(text))
        return "\n".join(out)

    def _stuck_frames(self, ranks: Sequence[int]) -> dict[int, list]:
        """rank -> its frames, outermost first, from its stack dump (:meth:`stacks`)."""
        try:
            return {r: sources.parse_stack(t) for r, t in self.stacks(ranks).items()}
        except Exception:  # noqa: BLE001 - an aid to the message only
            return {}

    def dead_ranks(self) -> list[int]:
        """Ranks whose engine process is gone (checked on this host, without messages).

        Returns
        -------
        list of int
            Ranks whose engine has exited or is a zombie; empty when all live. Engines
            of unknown process id (another host) are not checked.
        """
        import psutil

        dead = []
        for rank, pid in zip(self.rank_ids, self.pids, strict=False):
            if not pid:
                continue
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    dead.append(rank)
            except psutil.NoSuchProcess:
                dead.append(rank)
        return dead


    def _timeout_report(self, ar, timeout: float, what: str, partial=None,
                        where=None) -> tuple[str, list[int], list[int], dict[int, list]]:
        """What a call that timed out says: the busy and the finished ranks, the line each
        busy rank was at (`where` names it from its frames), and a hint; with the busy
        ranks, the finished ones and the busy ranks' frames. `partial`: a cell whose output
        so far is printed first."""
        outstanding = self.client.outstanding
        pending = [r for r, mid in zip(self.rank_ids, ar.msg_ids, strict=False)
                   if mid in outstanding]
        finished = [r for r in self.rank_ids if r not in pending]
        if partial is not None:
            _show_partial(partial)
        lines = [f"{what} did not finish in {timeout:g} s: rank{'s' * (len(pending) != 1)} "
                 f"{_join(pending)} still busy"
                 + (f", rank{'s' * (len(finished) != 1)} {_join(finished)} finished"
                    if finished else "") + "."]
        frames = self._stuck_frames(pending) if where is not None else {}
        stuck = {}
        for r, f in frames.items():
            try:
                stuck[r] = where(f)
            except Exception:  # noqa: BLE001 - an aid to the message only
                stuck[r] = ""
        lines += [f"  rank {r} was at {w}" for r, w in stuck.items() if w]
        lines.append(sources.stuck_hint_at(stuck, finished))
        return "\n".join(lines) + "\n", pending, finished, frames


# ---------------------------------------------------------------------------------------
# what a timeout message says


def _where_in_function(frames, func, args, kwargs) -> str:
    """Where a rank running ``lab.run(func, ...)`` was: the innermost frame of the
    notebook's code, with its cell line (:func:`mpilab.sources.describe_frame`)."""
    if not frames:
        return ""
    smap = sources.SourceMap.of(func, *args, *kwargs.values())
    return sources.describe_frame(frames, smap)


def _where_in_cell(frames, code: str, line_offset: int) -> str:
    """Where a rank running a cell's `code` (``%%mpi``) was, as 'line 3 of this cell:
    comm.Recv(buf, source=0)'. The engine compiled the code without its leading blank
    lines; a frame in a function an earlier cell defined is named by its function."""
    user = [f for f in frames if not sources.is_library(f[0])]
    if not user:
        return ""
    cell_file = user[0][0]  # the outermost frame of the engine's own code: this cell
    filename, lineno, func = user[-1]
    if filename != cell_file:
        return f"line {lineno} of {func} (defined in an earlier cell)"
    body = code.splitlines()
    blank = next((i for i, t in enumerate(body) if t and not t.isspace()), 0)
    i = blank + lineno - 1
    text = body[i].strip() if 0 <= i < len(body) else ""
    where = f"line {i + 1 + line_offset} of this cell" + (
        f" (in {func})" if func != "<module>" else "")
    return f"{where}: {text}" if text else where


def _show_partial(ar) -> None:
    """Print what a timed-out cell wrote so far (the lesson is often in it)."""
    try:
        for eid, out in zip(ar._targets if hasattr(ar, "_targets") else [], ar.stdout, strict=False):
            if out:
                print(f"[stdout:{eid}] {out}", end="" if out.endswith("\n") else "\n")
    except Exception:
        pass


def _join(xs: Sequence[int]) -> str:
    xs = list(xs)
    if not xs:
        return "none"
    return ", ".join(map(str, xs[:-1])) + (" and " if len(xs) > 1 else "") + str(xs[-1])
