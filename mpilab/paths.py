"""Where the course's files are: lectures, labs, autograder and reference data.

The package and the course are two things: a checkout holds both (``pip install -e .``,
``make``), while a non-editable ``pip install .`` puts only the package in
site-packages, and the course's folders stay in the checkout the notebooks run from. The
course root is, in this order: ``$MPILAB_COURSE``; the folder above the package when it
is a checkout; the nearest folder at or above the working directory that holds
``lectures/``, ``labs/`` and ``reference/`` (a notebook runs in ``lectures/`` or
``labs/<lab>/``, a command in the checkout).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["CourseNotFound", "course_root", "reference_dir", "reference_run", "reference_label"]

_MARKERS = ("lectures", "labs", "reference")


class CourseNotFound(FileNotFoundError):
    """No course folder (lectures/, labs/, reference/) was found."""


def _is_course(path: Path) -> bool:
    return all((path / m).is_dir() for m in _MARKERS)


def course_root() -> Path:
    """The course's folder (see the module's docstring); :class:`CourseNotFound` if none.

    Returns
    -------
    pathlib.Path
        The resolved folder that holds ``lectures/``, ``labs/`` and ``reference/``.

    Raises
    ------
    CourseNotFound
        ``$MPILAB_COURSE`` names a folder without them, or no such folder is beside the
        package or at or above the working directory.
    """
    env = os.environ.get("MPILAB_COURSE")
    if env:
        root = Path(env).expanduser().resolve()
        if not _is_course(root):
            raise CourseNotFound(f"MPILAB_COURSE={env} has no lectures/, labs/ and reference/")
        return root
    beside = Path(__file__).resolve().parent.parent
    if _is_course(beside):
        return beside
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if _is_course(folder):
            return folder
    raise CourseNotFound(
        "the course's folders (lectures/, labs/, reference/) are not beside the installed "
        f"package nor above {here}: run from a checkout of the course, or set MPILAB_COURSE")


def reference_dir() -> Path:
    """``reference/``: measurements and simulations saved on known machines, labelled.

    Where the course's other folders cannot be seen but ``reference/`` can, beside the
    package (the autograder's sandbox binds it alone: the labs' sources stay hidden),
    that one.

    Returns
    -------
    pathlib.Path
        ``reference/`` in :func:`course_root`, else beside the package (raises
        :class:`CourseNotFound` as :func:`course_root` does when neither is there).
    """
    try:
        return course_root() / "reference"
    except CourseNotFound:
        beside = Path(__file__).resolve().parent.parent / "reference"
        if beside.is_dir():
            return beside
        raise


def reference_run(folder: str, name: str) -> dict:
    """A benchmark's output kept in ``reference/<folder>/<name>``: ``{"meta", "records"}``.

    Parameters
    ----------
    folder : str
        A folder of ``reference/``, one machine and MPI (``"16core-xeon-openmpi5"``).
    name : str
        The JSON file in it (``"allgather16.json"``).

    Returns
    -------
    dict
        The run as the benchmark wrote it: ``"meta"`` (machine, MPI, settings, date) and
        ``"records"`` (the measurements).
    """
    return json.loads((reference_dir() / folder / name).read_text())


def reference_label(folder: str, meta: dict) -> str:
    """What a lecture prints above a run kept in ``reference/<folder>``: where it is kept,
    the machine, the MPI and the day it was measured, and that it is not this machine.

    Parameters
    ----------
    folder : str
        The folder of ``reference/`` the run is kept in.
    meta : dict
        The run's ``"meta"`` (from :func:`reference_run`): ``cores``, ``cpu_model``,
        ``mpi_library``, ``mpi_version`` and ``measured_at`` are read.

    Returns
    -------
    str
        One line, e.g. ``REFERENCE DATA from reference/16core-xeon-openmpi5 (16 cores of
        an Intel(R) Xeon(R) Processor, Open MPI 5.0.11, measured 2026-11-26), NOT this
        machine``.
    """
    library = {"openmpi": "Open MPI", "mpich": "MPICH"}.get(meta.get("mpi_library"), "MPI")
    return (f"REFERENCE DATA from reference/{folder} ({meta['cores']} cores of an "
            f"{meta['cpu_model']}, {library} {meta['mpi_version']}, measured "
            f"{meta['measured_at'][:10]}), NOT this machine")
