"""The grader's MPI job: ranks in the sandbox that run a student's functions on request.

:class:`Pool` starts ``mpiexec -n N python -m mpilab.autograder.worker`` inside a
:class:`~mpilab.autograder.sandbox.Sandbox`, accepts one Unix-socket connection per rank and
sends each request to every rank (``call``: ``func(comm, *args)`` on a sub-communicator of
the first `ranks` ranks) or to rank 0 (``local``: ``func(*args)``). Replies are decoded
with :mod:`mpilab.autograder.wire` only. A call that does not finish in time, or a rank that
dies, ends the job (its whole PID namespace); the next request starts a fresh one, so a
check never inherits the state of a failed one.

The job's output (what the student's code printed) is drained and its last few KiB kept,
so a flood of output can neither fill a pipe nor the grader's memory.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import pickle
import selectors
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import quiet, wire
from .sandbox import Sandbox, read_untrusted
from .worker import send_frame

__all__ = ["Pool", "PoolError", "Outcome", "carries_student_code"]

MAX_REPLY = 256 << 20


def carries_student_code(payload: bytes) -> bool:
    """Whether a request's pickle holds a student's code: a function their kernel
    pickled (loaded by :func:`mpilab.autograder.worker.student_function`) or a module they
    compiled (:class:`mpilab.build.CompiledFunction`).

    Parameters
    ----------
    payload : bytes
        The grader's pickle of ``(func, args, kwargs)``.

    Returns
    -------
    bool
        True when the ranks will load and may run code of the student's.
    """
    return b"student_function" in payload or b"CompiledFunction" in payload


#: the course's modules a request's pickle refers to by name (its harnesses and checks)
PRELOAD_PREFIX = "mpilab.grading."


def preloads() -> list[str]:
    """The course's check modules this grader has imported, for the ranks to import at
    their start.

    A request names its harness by module (the pickle imports it on the ranks): on a fresh
    job, that import (lab 06's ``mpilab.grading.allgather`` is 1.1 s of a core per rank, 4
    ranks on 2 cores) would run inside the student's timeout, which measures the student's
    function. A restarted job beside three other gradings once spent all of a correct
    Bruck's 10 s importing. Imported at the job's start, they run under
    :attr:`Pool.start_timeout` instead, held like the rest of the start.

    Returns
    -------
    list of str
        Names of modules under :data:`PRELOAD_PREFIX` in this process, sorted.
    """
    return sorted(m for m in list(sys.modules) if m.startswith(PRELOAD_PREFIX))


class PoolError(RuntimeError):
    """The MPI job could not be started (not the student's fault: say what failed)."""


@dataclass
class Outcome:
    """What a request came to.

    ``replies`` maps rank to its decoded reply; ``timed_out`` lists ranks that had not
    replied in time, and ``stacks`` their own stack dumps (faulthandler text); ``died``
    says how the job ended when a rank died (``None`` otherwise); ``bad`` maps rank to why
    its reply could not be used (too large, or not readable).
    """

    replies: dict[int, tuple] = field(default_factory=dict)
    timed_out: list[int] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    died: str | None = None
    bad: dict[int, str] = field(default_factory=dict)


class _Drain(threading.Thread):
    """Read a pipe to its end, keeping only the last `keep` bytes."""

    def __init__(self, pipe, keep: int = 16 << 10):
        super().__init__(daemon=True)
        self.pipe, self.keep = pipe, keep
        self.buf: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.start()

    def run(self):
        try:
            for chunk in iter(lambda: self.pipe.read1(65536), b""):
                self.buf.append(chunk)
                self.size += len(chunk)
                while self.size - len(self.buf[0]) > self.keep:
                    self.size -= len(self.buf.popleft())
        except (OSError, ValueError):
            pass

    def tail(self) -> str:
        return b"".join(self.buf)[-self.keep:].decode(errors="replace")


class Pool:
    """`ranks` MPI ranks in `box`, started on first use.

    Parameters
    ----------
    box : Sandbox
        Where the ranks run.
    ranks : int
        Ranks in the job (``MPI.COMM_WORLD`` size, :attr:`ranks`); a call uses the first
        ones (:meth:`call`).
    cwd : path
        The ranks' working directory (the student's home in the sandbox).
    rw, ro : list of paths
        Host folders the ranks may write, or only read (besides `workdir`).
    env : dict
        Environment of the ranks (PATH, HOME, MPI settings ...).
    workdir : path
        Writable folder for the socket and the stack dumps (made by the caller).
    start_timeout : float, optional
        Seconds the ranks have to start and connect (default 60).
    """

    def __init__(self, box: Sandbox, ranks: int, *, cwd: str, env: dict[str, str],
                 workdir: str, rw: list[str] = (), ro: list[str] = (),
                 start_timeout: float = 60.0):
        self.box, self.ranks, self.cwd, self.env = box, ranks, cwd, dict(env)
        self.workdir = workdir
        self.rw, self.ro = list(rw), list(ro)
        self.start_timeout = start_timeout
        self.proc = None
        self.conns: dict[int, socket.socket] = {}
        self._seq = itertools.count(1)
        self._drains: list[_Drain] = []
        self.starts = 0
        self.ran_student = False  # whether this job has run a student's code yet

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and len(self.conns) == self.ranks

    def start(self) -> None:
        """Start the job afresh (ending a running one) and wait until every rank connects.

        Held under :func:`mpilab.autograder.quiet.working`: it waits while another grading
        measures.

        Raises
        ------
        PoolError
            When the job exits, or not every rank connects within `start_timeout`
            seconds; the message ends with the job's last output.
        """
        # the ranks' start (mpiexec, N Pythons importing mpi4py and numpy) keeps the cores
        # busy for seconds: not while another grading measures
        with quiet.working():
            self._start()

    def _start(self) -> None:
        from .. import runtime

        self.stop()
        self.starts += 1
        self.ran_student = False
        path = os.path.join(self.workdir, f"pool-{self.starts}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(path)
        os.chmod(path, 0o777)
        lsock.listen(self.ranks)
        # the workers run faulthandler's watchdog thread beside the one that calls MPI
        launch = runtime.launch(self.ranks, thread_level="funneled")
        env = {**self.env, **launch.env}
        argv = launch.argv([sys.executable, "-P", "-m", "mpilab.autograder.worker", path,
                            self.workdir, ",".join(preloads())])
        self.proc = self.box.popen(argv, cwd=self.cwd, env=env, rw=[self.workdir, *self.rw],
                                   ro=self.ro, stdin=open(os.devnull, "rb"),  # noqa: SIM115
                                   stdout=_pipe(), stderr=_pipe())
        self._drains = [_Drain(self.proc.stdout), _Drain(self.proc.stderr)]
        deadline = time.monotonic() + self.start_timeout
        lsock.settimeout(0.2)
        try:
            while len(self.conns) < self.ranks:
                code = self.proc.poll()
                if time.monotonic() > deadline or code is not None:
                    why = f"exit status {code}" if code is not None else "timed out"
                    out = self.output()
                    self.stop()
                    raise PoolError(f"the {self.ranks} MPI ranks of the grader did not start "
                                    f"({why}):\n{out[-2000:]}")
                try:
                    conn, _ = lsock.accept()
                except TimeoutError:
                    continue
                conn.settimeout(10)
                hello = _recv_frame(conn, 4096)
                info = json.loads(hello) if hello else {}
                rank = info.get("rank") if isinstance(info, dict) else None
                if type(rank) is not int or not 0 <= rank < self.ranks or rank in self.conns:
                    conn.close()
                    continue
                conn.settimeout(None)
                self.conns[rank] = conn
        finally:
            lsock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def stop(self) -> None:
        """End the job (its whole PID namespace) and close the ranks' connections; harmless when
        none runs. The next request starts a fresh job."""
        for c in self.conns.values():
            with contextlib.suppress(OSError):
                c.close()
        self.conns.clear()
        if self.proc is not None:
            self.box.kill(self.proc)
            for d in self._drains:
                d.join(timeout=2)
        self.proc = None

    def output(self) -> str:
        """The last few KiB the job wrote (stdout, then stderr).

        Returns
        -------
        str
            Up to 16 KiB of each stream that wrote anything, joined by a newline (bytes
            that are not UTF-8 replaced).
        """
        return "\n".join(d.tail() for d in self._drains if d.tail())

    # -- requests -----------------------------------------------------------------------
    def call(self, payload: bytes, ranks: int, timeout: float) -> Outcome:
        """``func(comm, *args)`` on the first `ranks` ranks; `payload` pickles
        ``(func, args, kwargs)``.

        Starts the job first when it is not running; ends it after a reply that times
        out, a rank that dies or a reply that cannot be read.

        Parameters
        ----------
        payload : bytes
            The grader's pickle of ``(func, args, kwargs)``
            (:func:`mpilab.autograder.isolated.payload`); the student's functions in it
            are their kernel's bytes, loaded on the ranks only.
        ranks : int
            Ranks in the call's communicator: the first `ranks` of the job's
            :attr:`ranks`; the others answer ``("out",)``.
        timeout : float
            Seconds the call may take on the ranks.

        Returns
        -------
        Outcome
            The reply of each rank, and which ranks timed out, died or replied garbage.

        Raises
        ------
        PoolError
            When `ranks` is more than the job's, or the job cannot start.
        """
        if ranks > self.ranks:
            raise PoolError(f"a call on {ranks} ranks in a job of {self.ranks}")
        return self._request("call", payload, list(range(self.ranks)), ranks, timeout)

    def local(self, payload: bytes, timeout: float) -> Outcome:
        """``func(*args, **kwargs)`` on rank 0 alone.

        Parameters
        ----------
        payload : bytes
            The grader's pickle of ``(func, args, kwargs)``, as for :meth:`call`.
        timeout : float
            Seconds the call may take.

        Returns
        -------
        Outcome
            Rank 0's reply, or that it timed out, died or replied garbage.

        Raises
        ------
        PoolError
            When the job cannot start.
        """
        return self._request("local", payload, [0], 1, timeout)

    def _request(self, kind: str, payload: bytes, targets: list[int], ranks: int,
                 timeout: float) -> Outcome:
        # the cores are shared with gradings beside this one: wait while one measures
        with quiet.working():
            return self._request_now(kind, payload, targets, ranks, timeout)

    def _request_now(self, kind: str, payload: bytes, targets: list[int], ranks: int,
                     timeout: float) -> Outcome:
        student = carries_student_code(payload)
        if not student and self.ran_student:
            # the course's own run (a reference measured on the ranks) gets a job no
            # student code ran in: a student's function may have patched the ranks'
            # modules (mpilab, NumPy) to fool the runs that come after it
            self.stop()
        if not self.alive:
            self.start()
        self.ran_student = self.ran_student or student
        seq = next(self._seq)
        msg = pickle.dumps((kind, seq, ranks, float(timeout), payload))
        out = Outcome()
        for r in targets:
            try:
                send_frame(self.conns[r], msg)
            except OSError:
                out.died = self._death()
                self.stop()
                return out
        self._collect(out, targets, timeout, seq)
        if out.timed_out or out.died or out.bad:
            self.stop()  # a job with a stuck, dead or garbled rank is not reused
        return out

    def _collect(self, out: Outcome, targets: list[int], timeout: float, seq: int) -> None:
        sel = selectors.DefaultSelector()
        bufs = {r: bytearray() for r in targets}
        for r in targets:
            sel.register(self.conns[r], selectors.EVENT_READ, r)
        deadline = time.monotonic() + timeout + 0.5  # the ranks' own timers fire at `timeout`
        pending = set(targets)
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in sel.select(timeout=min(left, 0.2)):
                    r = key.data
                    try:
                        chunk = key.fileobj.recv(1 << 20)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        out.died = self._death()
                        return
                    bufs[r] += chunk
                    done = _frame_of(bufs[r])
                    if done is None:
                        continue
                    if done is _TOO_BIG:
                        out.bad[r] = "a result larger than 256 MiB"
                    else:
                        try:
                            reply = wire.decode(bytes(done))
                            if type(reply) is not tuple or not reply or type(reply[0]) is not str:
                                raise wire.WireError("not a reply")
                            out.replies[r] = reply
                        except wire.WireError as exc:
                            out.bad[r] = f"a reply the grader cannot read ({exc})"
                    pending.discard(r)
                    sel.unregister(key.fileobj)
                if self.proc.poll() is not None and pending:
                    out.died = self._death()
                    return
        finally:
            sel.close()
        if pending:
            out.timed_out = sorted(pending)
            out.stacks = self._stacks(out.timed_out, seq)

    def _stacks(self, ranks: list[int], seq: int, wait: float = 1.5) -> dict[int, str]:
        found: dict[int, str] = {}
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            for r in ranks:
                if r in found:
                    continue
                data = read_untrusted(Path(self.workdir, f"stack.{seq}.{r}"), 1 << 20)
                text = data.decode(errors="replace") if data else ""
                if 'File "' in text:
                    found[r] = text[:20000]
            if len(found) == len(ranks):
                break
            time.sleep(0.05)
        return found

    def _death(self) -> str:
        """How the job ended, in a student's words, from its exit and its last output."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=3)
            except Exception:  # noqa: BLE001 - still running: killed below
                pass
        text = self.output()
        low = text.lower()
        if "mpi_abort" in low:
            return "MPI_Abort was called"
        if "segmentation fault" in low or "signal 11" in low:
            return "a rank crashed (segmentation fault)"
        if "signal 9" in low or "killed" in low:
            return "a rank was killed (out of memory?)"
        if "exited on signal" in low:
            return "a rank was killed by a signal"
        return "a rank ended its process (os._exit, a crash, or out of memory)"


def _pipe():
    import subprocess

    return subprocess.PIPE


_TOO_BIG = object()


def _frame_of(buf: bytearray):
    if len(buf) < 8:
        return None
    (n,) = struct.unpack_from("<Q", buf)
    if n > MAX_REPLY:
        return _TOO_BIG
    if len(buf) < 8 + n:
        return None
    return memoryview(buf)[8:8 + n]


def _recv_frame(conn: socket.socket, limit: int) -> bytes | None:
    from .worker import recv_frame

    try:
        return recv_frame(conn, limit)
    except (OSError, ValueError):
        return None
