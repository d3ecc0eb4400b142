"""One MPI rank of the job that runs a student's functions for the grader (inside the sandbox).

Started by :class:`mpilab.autograder.pool.Pool` as::

    mpiexec -n N python -P -m mpilab.autograder.worker SOCKET WORKDIR [MODULES]

Each rank imports the course's modules the grader named (MODULES, comma-separated: the
checks its requests' harnesses live in, so that importing them is not counted in a
student's timeout), connects to the grader's Unix socket, says who it is, then serves
requests until the socket closes. A request is a pickle made by the grader (trusted); inside it, the
student's functions are still the bytes the student's kernel pickled, and are loaded here,
inside the timed region, where loading them may run the student's code. A reply is plain
data in :mod:`mpilab.autograder.wire`'s format, so the grader never unpickles anything a
student's process wrote:

* ``("ok", value)``, ``("raised", name, message, frames)``, ``("bad", why)``: what the
  call did on this rank;
* ``("out",)``: this rank was not part of the call's communicator.

A rank that is still running after the request's timeout writes its own stack to
``WORKDIR/stack.<request>.<rank>`` (``faulthandler``'s watchdog thread, which needs no
interpreter lock), so the grader can say where every stuck rank was before it kills the
job.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import socket
import struct
import sys

__all__ = ["main", "student_object", "student_function", "send_frame", "recv_frame"]

MAX_REQUEST = 1 << 30


def student_object(payload: bytes):
    """A student's object from the bytes their kernel pickled (runs their code: sandbox only).

    Parameters
    ----------
    payload : bytes
        A pickle made in the student's kernel (untrusted).

    Returns
    -------
    object
        What `payload` unpickles to; on the MPI ranks, a ``(function, args, kwargs)``
        tuple.
    """
    return pickle.loads(payload)


def student_function(payload: bytes):
    """A student's function from the bytes their kernel pickled, watched while it runs
    (:func:`mpilab.autograder.watch.watched`: a call of the course's own answer is
    refused); what is not a plain function comes back as it was pickled.

    Parameters
    ----------
    payload : bytes
        A pickle from the student's kernel (untrusted), as :func:`student_object` takes.

    Returns
    -------
    object
        The watched function, or what `payload` unpickles to.
    """
    from mpilab.autograder.watch import watched

    return watched(student_object(payload))


def send_frame(sock: socket.socket, data: bytes) -> None:
    """Send `data` as one frame: its length (8 bytes, little-endian), then the bytes.

    Parameters
    ----------
    sock : socket.socket
        A connected stream socket (the grader's Unix socket).
    data : bytes
        The frame's content.
    """
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        b = sock.recv(min(n - got, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, limit: int = MAX_REQUEST) -> bytes | None:
    """Receive one frame that :func:`send_frame` sent.

    Parameters
    ----------
    sock : socket.socket
        A connected stream socket.
    limit : int, optional
        The largest frame accepted, in bytes (default ``MAX_REQUEST``, 1 GiB).

    Returns
    -------
    bytes or None
        The frame's content; None when the socket closed before a whole frame came.

    Raises
    ------
    ValueError
        When the frame announces more than `limit` bytes.
    """
    head = _recv_exact(sock, 8)
    if head is None:
        return None
    (n,) = struct.unpack("<Q", head)
    if n > limit:
        raise ValueError(f"a frame of {n} bytes")
    return _recv_exact(sock, n)


def _frames(tb) -> list[tuple[str, int, str]]:
    import traceback

    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb)]


def _raised(exc: BaseException, skip: int = 1) -> tuple:
    try:
        text = str(exc)[:2000]
    except Exception:  # noqa: BLE001 - a student's __str__ may raise
        text = f"<{type(exc).__name__} whose message cannot be shown>"
    return ("raised", type(exc).__name__[:200], text, _frames(exc.__traceback__)[skip:])


def _result(value) -> tuple:
    from mpilab.autograder.wire import plain

    try:
        return ("ok", plain(value, "the value"))
    except TypeError as exc:
        return ("bad", str(exc))


def _serve(world, rank: int, workdir: str, request: tuple) -> tuple | None:
    import faulthandler

    from mpi4py import MPI

    kind, seq, ranks, timeout, payload = request
    comm = None
    if kind == "call":
        inside = rank < ranks
        comm = world.Split(0 if inside else MPI.UNDEFINED, rank)
        if not inside:
            return ("out",)
    stack = open(os.path.join(workdir, f"stack.{seq}.{rank}"), "w")  # noqa: SIM115
    faulthandler.dump_traceback_later(timeout, repeat=False, file=stack)
    try:
        try:
            func, args, kwargs = student_object(payload)
        except BaseException as exc:  # noqa: BLE001 - the student's pickle, loaded here
            out = _raised(exc, skip=0)
            return ("raised", out[1], f"could not be loaded on the MPI ranks: {out[2]}", [])
        try:
            value = func(comm, *args, **kwargs) if kind == "call" else func(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from student code too
            return _raised(exc)
        return _result(value)
    finally:
        faulthandler.cancel_dump_traceback_later()
        stack.close()
        if comm is not None:
            try:
                comm.Free()
            except Exception:  # noqa: BLE001
                pass


_COURSE_MODULE = re.compile(r"mpilab(\.[A-Za-z_]\w*)+")


def preload(names: str) -> list[str]:
    """Import the course's modules named in `names` (comma-separated), before any request.

    A name that is not a module of the course (``mpilab.`` and identifiers) is ignored; a
    module that fails to import here is left to fail where a request needs it, with the
    error said to the student's check.

    Parameters
    ----------
    names : str
        Module names, comma-separated (the pool's :func:`mpilab.autograder.pool.preloads`).

    Returns
    -------
    list of str
        The names imported.
    """
    import importlib

    done = []
    for name in filter(None, names.split(",")):
        if not _COURSE_MODULE.fullmatch(name):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - said where a request needs it
            continue
        done.append(name)
    return done


def main(argv: list[str] | None = None) -> int:
    """Serve the grader's requests on this rank until the socket closes or says stop.

    Parameters
    ----------
    argv : list of str, optional
        ``[SOCKET, WORKDIR, MODULES]``: the grader's Unix socket, the folder for the stuck
        ranks' stacks and, optionally, the course's modules to import first (comma-
        separated names under ``mpilab.``; default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status, 0.
    """
    from mpi4py import MPI

    from mpilab import build
    from mpilab.autograder import wire

    build.defer_compiles()  # as in the student's kernel (mpilab.autograder.student)
    from mpilab.autograder.watch import guard_kernels

    guard_kernels()  # a student's function that calls the course's kernels is seen
    args = argv or sys.argv[1:]
    sock_path, workdir = args[:2]
    preload(args[2] if len(args) > 2 else "")
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    send_frame(sock, json.dumps({"rank": rank, "size": world.Get_size(),
                                 "pid": os.getpid()}).encode())
    while True:
        msg = recv_frame(sock)
        if msg is None:
            break
        request = pickle.loads(msg)  # the grader's own bytes
        if request[0] == "stop":
            break
        out = _serve(world, rank, workdir, request)
        try:
            data = wire.encode(out)
        except (wire.WireError, RecursionError) as exc:
            data = wire.encode(("bad", f"the value returned cannot be sent back: {exc}"))
        send_frame(sock, data)
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
