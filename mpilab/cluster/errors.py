"""What goes wrong on a cluster, as exceptions whose message says what to do next."""

from __future__ import annotations

from collections.abc import Sequence

from .. import sources


class ClusterError(sources.MessageOnly, RuntimeError):
    """The cluster could not do what was asked; the message says what to do next."""


class MPITimeout(ClusterError, TimeoutError):
    """Ranks did not finish in time (a deadlock, an endless loop, or too slow).

    ``pending`` lists the ranks that were still busy; ``finished`` those that returned;
    ``stacks`` where the busy ranks were, as frames, when their stacks could be read.
    """

    def __init__(self, message: str, pending: Sequence[int] = (), finished: Sequence[int] = (),
                 stacks: dict[int, list] | None = None):
        super().__init__(message)
        self.pending = list(pending)
        self.finished = list(finished)
        self.stacks = stacks or {}  # busy rank -> its frames (file, line, function), outermost first


class ClusterDied(ClusterError):
    """An engine (and with it the MPI job) died."""


class RankError(ClusterError):
    """Code raised an exception on one or more ranks.

    ``errors`` maps rank to ``(exception name, message)``.
    """

    def __init__(self, message: str, errors: dict[int, tuple[str, str]]):
        super().__init__(message)
        self.errors = errors
