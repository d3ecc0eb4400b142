"""A grading's scratch folder, and what gradings that ended leave behind.

Every grading works in a scratch folder of its own (:func:`make_scratch`,
``$TMPDIR/mpilab-grade-XXXX``), claimed by a lock held while the grading runs; its
sandboxes' cgroups are named after it (:class:`mpilab.autograder.sandbox.Sandbox`). A
grading killed before it could clean up leaves both: the next grading removes the folders
and empty cgroups nobody claims (:func:`remove_stale_scratch`,
:func:`remove_stale_cgroups`), and :func:`leftovers` / :func:`unclaimed` list them (the
tests, ``python -m mpilab.doctor``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

__all__ = ["SCRATCH_PREFIX", "make_scratch", "remove_stale_scratch", "remove_stale_cgroups",
           "leftovers", "unclaimed"]

SCRATCH_PREFIX = "mpilab-grade-"
_CLAIM = ".claimed"
_KEEP = ".keep"


def make_scratch(keep: bool = False):
    """A new scratch folder for one grading, and the open file that claims it.

    The claim is an exclusive ``flock`` on a file inside, held while the file is open (the
    descriptor is not inherited by child processes): a folder whose claim nobody holds
    belongs to a grading that ended, cleanly or killed, and :func:`remove_stale_scratch`
    may remove it. `keep` marks it to be kept (``keep_scratch``, for debugging).

    The claim file appears already locked: it is made and locked under a name of its own,
    then renamed into place. Another grading's :func:`remove_stale_scratch` running
    meanwhile finds either a fresh folder without a claim file (left alone until
    `unclaimed_for` old) or a held claim, never a claim file that nobody holds yet (which
    it would take for a dead grading's, and remove).

    Parameters
    ----------
    keep : bool, optional
        Mark the folder to be kept after the grading (default False).

    Returns
    -------
    root : str
        The new folder, ``$TMPDIR/mpilab-grade-XXXX``.
    claim : file object
        The open claim file; close it (or end the process) to release the claim.
    """
    root = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
    tmp = os.path.join(root, f"{_CLAIM}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        claim = os.fdopen(fd, "w")  # held until the end of the grading
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows this name
        os.rename(tmp, os.path.join(root, _CLAIM))  # the lock goes with the open file
        if keep:
            Path(root, _KEEP).touch()
    except BaseException:
        claim.close()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, claim


def _claimed(folder: Path) -> bool:
    try:
        with open(folder / _CLAIM) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except FileNotFoundError:
        return False


def remove_stale_scratch(base: str | None = None, unclaimed_for: float = 300.0) -> list[str]:
    """Remove the scratch folders of gradings that ended without removing them; which.

    A folder is stale when no running grading holds its claim. One without a claim file
    (made by an older version, or a grading killed between making the folder and claiming
    it) counts as stale only once it is `unclaimed_for` seconds old. Folders kept on
    purpose (``keep_scratch``) stay.

    Parameters
    ----------
    base : str, optional
        The folder holding the scratch folders (default: :func:`tempfile.gettempdir`).
    unclaimed_for : float, optional
        Seconds after which a folder without a claim file counts as stale (default 300).

    Returns
    -------
    list of str
        The paths of the folders removed.
    """
    removed = []
    for d in Path(base or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            if not d.is_dir() or d.is_symlink() or (d / _KEEP).exists():
                continue
            if not (d / _CLAIM).exists() and time.time() - d.stat().st_mtime < unclaimed_for:
                continue
            if _claimed(d):
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(str(d))
    return removed


def leftovers() -> list[str]:
    """Cgroups and scratch folders of gradings that ended without cleaning up.

    Returns
    -------
    list of str
        Their paths (a running grading's are listed too: :func:`unclaimed` leaves those
        out).
    """
    found = []
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"):
        found += [str(p) for p in Path(base).glob("mpilab-grade-*") if p.is_dir()]
    found += [str(p) for p in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*")
              if not (p / _KEEP).exists()]
    return found


def unclaimed() -> list[str]:
    """The :func:`leftovers` whose grading is not running (no claim held on the scratch
    folder they belong to).

    Returns
    -------
    list of str
        Paths of cgroups and scratch folders (kept ones aside) that no running grading
        claims.
    """
    tmp = Path(tempfile.gettempdir())
    out = []
    for path in leftovers():
        p = Path(path)
        owner = p if p.parent == tmp else tmp / p.name.rsplit("-", 1)[0]
        if not owner.is_dir() or not _claimed(owner):
            out.append(path)
    return out


def remove_stale_cgroups(base: str | None = None, unclaimed_for: float = 300.0) -> int:
    """Remove the empty cgroups of gradings that ended without cleaning up; how many.

    A cgroup is named after its sandbox (``<name>-<role>``), and a grading's sandbox after
    its scratch folder: while that folder's claim is held (:func:`make_scratch`), its
    cgroups stay, even when empty between two jobs, so that another grading running at the
    same time (a second instructor, another lab) cannot take them from under it. A cgroup
    with no scratch folder counts as stale once `unclaimed_for` seconds old; one with a
    process in it cannot be removed anyway.

    Parameters
    ----------
    base : str, optional
        Where the scratch folders are (default: the temporary folder).
    unclaimed_for : float, optional
        Seconds a cgroup without a scratch folder is left alone (default 300).

    Returns
    -------
    int
        How many cgroups were removed.
    """
    tmp = Path(base or tempfile.gettempdir())
    removed = 0
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"):
        for d in Path(root).glob(f"{SCRATCH_PREFIX}*"):
            owner = tmp / d.name.rsplit("-", 1)[0]
            try:
                if owner.is_dir():
                    if _claimed(owner):
                        continue
                elif time.time() - d.stat().st_mtime < unclaimed_for:
                    continue
                d.rmdir()
                removed += 1
            except OSError:
                pass
    return removed
