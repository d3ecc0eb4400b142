"""What the classroom test modules share (tests/test_classroom.py, test_classroom_limits.py,
test_classroom_term.py): free ports for a hub, the hub's REST API, a login that starts a
server, a command as one of the class's accounts that must be refused, and a class of real
accounts started for a module and removed after it, leaving nothing behind.

The class itself is :class:`mpilab.bench.class_server.Classroom` (``scripts/classroom.sh``
with a generated roster), the one ``python -m mpilab.bench classroom`` runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from mpilab.bench.class_server import Classroom, NoClass, free_ports, leftovers, settle

__all__ = ["free_ports", "refused", "a_class", "ports_closed", "api", "log_in_and_start"]


def api(port: int, path: str, method: str = "GET", token: str | None = None,
        body: dict | None = None, timeout: float = 60) -> tuple[int, dict]:
    """A request to the hub on `port` (its REST API or a user's server): status and JSON."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text.strip().startswith(("{", "[")) else {})
    except urllib.error.HTTPError as e:
        return e.code, {}


def log_in_and_start(port: int, login: str, password: str, wait: float = 180) -> str:
    """A token from the hub for `login`'s password (PAM), and their server started (ready
    within `wait` seconds)."""
    code, made = api(port, f"/hub/api/users/{login}/tokens", "POST",
                     body={"auth": {"username": login, "password": password}})
    assert code in (200, 201), code
    token = made["token"]
    code, _ = api(port, f"/hub/api/users/{login}/server", "POST", token=token)
    assert code in (201, 202), code
    deadline = time.monotonic() + wait
    while True:
        code, user = api(port, f"/hub/api/users/{login}", token=token)
        if ((user.get("servers") or {}).get("", {})).get("ready"):
            return token
        assert time.monotonic() < deadline, f"{login}'s server not ready in {wait:g} s: {user}"
        time.sleep(1)


def refused(as_user: Callable[..., subprocess.CompletedProcess], login: str, *cmd: str) -> str:
    """`cmd` as `login` (through `as_user`) fails with 'Permission denied' (or 'Operation
    not permitted'); its error output."""
    done = as_user(login, *cmd)
    assert done.returncode != 0, f"{login} could: {' '.join(cmd)}\n{done.stdout}"
    assert "ermission denied" in done.stderr or "not permitted" in done.stderr, done.stderr
    return done.stderr


def ports_closed(port: int) -> bool:
    """Nothing listens on `port` and the next two (the class's, its proxy's API, its hub's)."""
    import socket

    for p in range(port, port + 3):
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", p)) == 0:
                return False
    return True


@contextlib.contextmanager
def a_class(students: list[str], instructor: str, venv: str, root: Path, state: Path,
            env: dict | None = None):
    """A class of these accounts (started; skips the test where no class can run), then
    stopped and removed: asserts that no process of its accounts and no file of theirs in
    /dev/shm is left, that its ports are closed, and that accounts and state are gone."""
    if os.geteuid() != 0:
        pytest.skip("a class needs root (accounts, PAM, the hub runs users' servers)")
    klass = Classroom(students, instructor, venv, root, state=state, env=env)
    try:
        klass.start()
    except NoClass as exc:
        shutil.rmtree(state, ignore_errors=True)
        pytest.skip(f"no class here: {exc}")
    except BaseException:
        klass.stop()
        raise
    uids = klass.uids() | {pwd.getpwnam(instructor).pw_uid}
    try:
        yield klass
    finally:
        stopped = klass.script("stop", timeout=600)
        left = settle(uids, 10.0)
        removed = klass.script("remove", timeout=600)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not left["processes"] and not left["shm"], f"left after stop: {left}"
        assert ports_closed(klass.port)
        for name in (*students, instructor):
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
        assert not state.exists()
        # nothing of the removed accounts in /tmp (their grading folders, Open MPI's
        # session folders): a later account given the same uid would find it as its own
        gone = leftovers(uids, tmp=tempfile.gettempdir())
        assert not gone["tmp"] and not gone["processes"], f"left after remove: {gone}"
