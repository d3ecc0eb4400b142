"""Run a lecture or lab headless, the way a student's kernel would, and leave nothing behind.

    python -m mpilab.notebooks run lectures/01-pingpong.md --out /tmp/01.ipynb

A notebook (jupytext text or ``.ipynb``) runs in a fresh ``python3`` kernel whose working
directory is the notebook's folder and whose ``MPILAB_NOTEBOOK`` names the notebook, so
its cluster gets the id a student opening it in Jupyter would get. A cell that runs past
its timeout is interrupted (an uninterrupted kernel killed mid-MPI leaves ``mpiexec``
orphaned); a cell that raises fails the run unless it is tagged ``raises-exception``.
Afterwards every process of the notebook's cluster is killed, whatever happened.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from unittest import mock

from jupyter_client.manager import AsyncKernelManager

from . import cluster, netlab

DEFAULT_TIMEOUT = 300.0


class IPCKernelManager(AsyncKernelManager):
    """A kernel reached over Unix sockets in a folder of its own, not over tcp.

    Over tcp, jupyter_client picks free ports and closes them before the kernel binds
    them, and kernels started side by side (tests, graders, a class's gradings) can take
    each other's ports meanwhile ("Address already in use": the kernel dies before it
    replies). Sockets in a private folder cannot be taken, and only the folder's owner can
    reach them. Every kernel the course starts itself is one: a notebook run here
    (:func:`execute`), the grader's kernel and the student's sandboxed kernel
    (:class:`mpilab.autograder.student_kernel.SandboxKernelManager`).

    Parameters
    ----------
    folder : str or path-like
        An existing folder for the sockets (``kernel-*``) and the connection file
        (``kernel.json``); whoever may enter it may talk to the kernel.
    **kwargs
        As for ``jupyter_client.manager.AsyncKernelManager`` (``kernel_name``,
        ``config``, ...).
    """

    def __init__(self, *, folder: str | os.PathLike, **kwargs):
        folder = os.fspath(folder)
        super().__init__(transport="ipc", ip=os.path.join(folder, "kernel"),
                         connection_file=os.path.join(folder, "kernel.json"), **kwargs)


class PrivateIPCKernelManager(IPCKernelManager):
    """An :class:`IPCKernelManager` in a private folder of its own, made here and removed
    with the manager: what a configuration can name where a tool makes its kernel's manager
    itself (``c.Execute.kernel_manager_class`` in ``autograder/nbgrader_config.py``, so
    ``nbgrader validate`` cannot lose its kernel's ports either), and what :func:`execute`
    runs a notebook in. Its folder is :attr:`folder`.

    Parameters
    ----------
    **kwargs
        As for ``jupyter_client.manager.AsyncKernelManager`` (``kernel_name``,
        ``config``, ...).
    """

    def __init__(self, **kwargs):
        self.folder = tempfile.mkdtemp(prefix="mpilab-kernel-")  # mode 700
        super().__init__(folder=self.folder, **kwargs)
        # a manager dropped without a shutdown: its folder goes with it (or at exit)
        weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        """jupyter_client's clean-up after a shutdown, then the folder (a restart keeps it)."""
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self.folder, ignore_errors=True)


def read(path: str | os.PathLike):
    """A notebook from an ``.ipynb`` file or any jupytext text format (``.md``, ``.py``).

    Parameters
    ----------
    path : str or path-like
        The notebook's file; its suffix picks the reader (``.ipynb``: nbformat, any
        other: jupytext).

    Returns
    -------
    nbformat.NotebookNode
        The notebook (nbformat version 4), not executed.
    """
    path = Path(path)
    if path.suffix == ".ipynb":
        import nbformat

        return nbformat.read(path, as_version=4)
    import jupytext

    return jupytext.read(path)


def cluster_id(path: str | os.PathLike) -> str:
    """The cluster id the notebook at `path` gets (see :func:`mpilab.cluster.default_cluster_id`).

    Parameters
    ----------
    path : str or path-like
        The notebook's file (made absolute, as ``MPILAB_NOTEBOOK`` is when it runs).

    Returns
    -------
    str
        The id its cluster's processes carry, the one :func:`execute` kills after a run.
    """
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    env["MPILAB_NOTEBOOK"] = str(Path(path).resolve())
    with mock.patch.dict(os.environ, env, clear=True):
        return cluster.default_cluster_id()


def execute(path: str | os.PathLike, *, timeout: float = DEFAULT_TIMEOUT,
            env: dict | None = None, kernel_name: str = "python3"):
    """Execute the notebook at `path`; return it with its outputs.

    Parameters
    ----------
    path : path-like
        ``.ipynb`` or a jupytext text notebook.
    timeout : float
        Seconds each cell may run before it is interrupted (and the run fails).
    env : dict, optional
        Extra environment variables for the kernel, e.g. ``{"MPILAB_QUICK": "1"}``.
    kernel_name : str
        Kernel to run it in.

    Returns
    -------
    nbformat.NotebookNode
        The executed notebook; ``metadata.mpilab`` records the cluster id and run time.

    Raises
    ------
    nbclient.exceptions.CellExecutionError
        A cell raised (and is not tagged ``raises-exception``) or timed out. The
        notebook executed so far is attached as ``exc.notebook``.
    """
    from nbclient import NotebookClient

    path = Path(path).resolve()
    nb = read(path)
    cid = cluster_id(path)
    kernel_env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    kernel_env.update(env or {})
    kernel_env["MPILAB_NOTEBOOK"] = str(path)
    km = PrivateIPCKernelManager(kernel_name=kernel_name)
    client = NotebookClient(nb, km=km, timeout=timeout, kernel_name=kernel_name,
                            interrupt_on_timeout=True, allow_errors=False,
                            record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    try:
        client.execute(env=kernel_env)
    except Exception as exc:
        try:
            exc.notebook = nb  # what ran so far, outputs included
        except AttributeError:  # pragma: no cover - an exception type without a __dict__
            pass
        raise
    finally:
        shutil.rmtree(km.folder, ignore_errors=True)  # whether or not the kernel started
        killed = cluster.kill_cluster_processes(cid)
        # emulated nodes the kernel left up: it is gone, so they are stale
        stale = netlab.remove_stale() if netlab.available() is None else []
        nb.metadata["mpilab"] = {"cluster_id": cid,
                                 "run_s": round(time.perf_counter() - t0, 1),
                                 "leftover_processes_killed": killed,
                                 "leftover_fabrics_removed": stale}
    return nb


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpilab.notebooks",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute a notebook headless")
    r.add_argument("path")
    r.add_argument("--out", help="write the executed notebook here (.ipynb)")
    r.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds per cell (default {DEFAULT_TIMEOUT:g})")
    a = p.parse_args(argv)

    import nbformat

    code = 0
    try:
        nb = execute(a.path, timeout=a.timeout)
    except Exception as exc:
        nb = getattr(exc, "notebook", None)
        print(f"{a.path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    if nb is not None:
        if a.out:
            nbformat.write(nb, a.out)
        meta = nb.metadata.get("mpilab", {})
        print(f"{a.path}: {'failed' if code else 'ran'} in {meta.get('run_s', '?')} s"
              + (f", executed notebook in {a.out}" if a.out else ""))
    return code


if __name__ == "__main__":
    sys.exit(_main())
