"""The emulated nodes (:mod:`mpilab.netlab`) that this process or its descendants made:
:class:`OwnFabrics`, for tests that check that theirs are gone while other test modules
make and remove their own on the same machine (tests/test_netlab.py, tests/test_lab07.py).
"""

from __future__ import annotations

import json
import os
import threading

import psutil

from mpilab import netlab


class OwnFabrics:
    """``with OwnFabrics() as own:`` ... `own.ids`: the fabrics that this process, or one
    of its descendants (a benchmark's process, a grading's kernels), made in the block.

    Other test modules make and remove fabrics on this machine at the same time, so a
    test checks only its own. A fabric's folder names its owner (pid and start time,
    ``owner.json``) from the start of its build; the owner is looked up while it lives
    (every `every` seconds, and only once per new folder). A fabric whose owner was gone
    before the first look cannot be told apart, and is not counted."""

    def __init__(self, every: float = 0.1):
        self.ids: set[str] = set()
        self._looked: set[str] = set()
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> OwnFabrics:
        self._looked = {p.name for p in netlab.STATE.glob("*")}  # there before: not ours
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def _watch(self) -> None:
        while not self._stop.wait(self._every):
            self._look()

    def _look(self) -> None:
        me = os.getpid()
        for d in netlab.STATE.glob("*"):
            if d.name in self._looked or not d.is_dir():
                continue
            try:
                state = json.loads((d / "owner.json").read_text())
            except (OSError, ValueError):
                continue  # being made, or being removed: look again next time
            self._looked.add(d.name)
            try:
                owner = psutil.Process(state["owner"])
                if abs(owner.create_time() - state["owner_started"]) < 1.0 and (
                        owner.pid == me or me in [p.pid for p in owner.parents()]):
                    self.ids.add(d.name)
            except (psutil.Error, KeyError, TypeError, ValueError):
                pass  # made to last (no owner), or its owner is gone already

    def stale(self) -> list[str]:
        """The ids of own fabrics still there whose owner is gone."""
        return [f for f in sorted(self.ids) if (netlab.STATE / f).exists()
                and not netlab._dir_owner_alive(netlab.STATE / f)]
