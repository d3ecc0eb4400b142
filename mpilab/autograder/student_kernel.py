"""The student's kernel at autograde time: a Jupyter kernel in the sandbox.

:class:`SandboxKernelManager` starts the kernel of the student's notebook through
:meth:`mpilab.autograder.sandbox.Sandbox.command` and talks to it over Unix sockets in a
folder of the scratch (its network namespace has only loopback); :data:`PREIMPORT` is
what the kernel runs first (:mod:`mpilab.autograder.student`), and :func:`shell_reply` waits for
its answer to one request, telling a kernel that died from one that stopped answering.
:class:`mpilab.autograder.nbgrader.IsolatedExecute` uses them.
"""

from __future__ import annotations

import os
import subprocess
import time
from queue import Empty

from jupyter_core.utils import run_sync
from nbclient.exceptions import DeadKernelError

from ..notebooks import IPCKernelManager
from .sandbox import NOBODY, Sandbox

__all__ = ["SandboxKernelManager"]

PREIMPORT = """\
import os as _os, sys as _sys
_path = _sys.path[:]
_sys.path[:] = [p for p in _sys.path if p not in ("", ".", _os.getcwd())]
try:
    import mpilab.autograder.student
finally:
    _sys.path[:] = _path
del _os, _sys, _path
"""


class SandboxKernelManager(IPCKernelManager):
    """A kernel in the sandbox, reached through Unix sockets in a folder of the scratch.

    Its network namespace has only loopback, so the grader talks to it over ``ipc``
    sockets in a bound folder; interrupts travel as messages (a signal to ``bwrap`` would
    not reach the kernel).
    """

    def __init__(self, *, box: Sandbox, home: str, ipc: str, exports: str,
                 env: dict[str, str], **kwargs):
        super().__init__(folder=ipc, **kwargs)
        self.box, self.home, self.ipc, self.exports, self.box_env = box, home, ipc, exports, env

    def format_kernel_cmd(self, extra_arguments=None):
        """The kernel's command line, wrapped to run in the sandbox (:meth:`Sandbox.command`).

        Parameters
        ----------
        extra_arguments : list of str, optional
            More arguments for the kernel (as jupyter_client's ``format_kernel_cmd``).

        Returns
        -------
        list of str
            The sandboxed command, run in the student's home with the student's
            environment; the home, ``ipc`` and ``exports`` folders writable.
        """
        cmd = super().format_kernel_cmd(extra_arguments)
        return self.box.command(cmd, cwd=self.home, env=self.box_env,
                                rw=[self.home, self.ipc, self.exports])

    async def _async_pre_start_kernel(self, **kw):
        kw["cwd"] = self.home
        # what the kernel process itself writes (not its cells' output, which travels as
        # messages) would otherwise reach the instructor's terminal: a flood stops here
        kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        if self.box.isolated and self.box.as_root:
            os.chown(self.connection_file, NOBODY, NOBODY)
        self.kernel_spec.interrupt_mode = "message"
        return cmd, kw


class Unresponsive(Exception):
    """The student's kernel did not answer in time."""


def shell_reply(kc, km, msg_id: str, timeout: float) -> dict:
    """The shell reply to `msg_id`, waited for at most `timeout` seconds.

    Parameters
    ----------
    kc : jupyter_client.AsyncKernelClient
        The client of the student's kernel (its shell channel is read).
    km : jupyter_client.AsyncKernelManager
        Its manager, asked whether the kernel is still alive while nothing arrives.
    msg_id : str
        The id of the request whose reply is wanted; other replies are dropped.
    timeout : float
        Seconds to wait in all.

    Returns
    -------
    dict
        The reply message.

    Raises
    ------
    Unresponsive
        No reply within `timeout`.
    nbclient.exceptions.DeadKernelError
        The kernel died while it was awaited.
    """

    async def wait():
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unresponsive(f"no answer in {timeout:g} s")
            try:
                msg = await kc.shell_channel.get_msg(timeout=min(left, 1.0))
            except (TimeoutError, Empty):
                if not await km.is_alive():
                    raise DeadKernelError("Kernel died") from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    return run_sync(wait)()
