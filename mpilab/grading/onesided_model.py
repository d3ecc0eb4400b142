"""Lab 03 Part D: a fence epoch's model, graded against an epoch measured now.

:func:`check_epoch_us` (:data:`EPOCH`, a :class:`~mpilab.grading.prediction.Prediction`)
grades ``epoch_us(n_bytes, empty_epoch_us, beta_MBps)``, the model of a fence epoch
carrying one Put (the empty epoch plus ``n / β``), first against
:func:`reference_epoch_us` on made-up numbers, then against an epoch of 1 MiB measured
just now (:func:`epoch_times`, on the ranks through :mod:`mpilab.grading.measured`).

The lab's test cells reach these through :mod:`mpilab.grading.onesided`, which
re-exports them. :data:`EPOCH` is declared, with its cells, by
:func:`mpilab.grading.prediction.fixed_plus_bytes` (one transfer as a fixed time plus
``n / β``), as lab 04's push is.
"""

from __future__ import annotations

from mpilab.buffers import doubles
from mpilab.grading import measured
from mpilab.grading.prediction import fixed_plus_bytes, guessed, unit_slips
from mpilab.timing import best_us

__all__ = ["PREDICTION_TOLERANCE", "EPOCH_BYTES", "epoch_times", "reference_epoch_us",
           "epoch_now", "EPOCH", "check_epoch_us", "show_epoch"]

#: The Put + Fence epoch of 1 MiB measured on this machine may take this many times the
#: model: below 1 only noise; above it what the model leaves out (the Put's own start-up,
#: the closing Fence waiting for it to complete).
PREDICTION_TOLERANCE = (0.5, 2.5)
EPOCH_BYTES = 1 << 20


def epoch_times(comm, nbytes: int, iters: int = 20, reps: int = 7) -> dict:
    """On every rank of `comm`: an empty fence epoch (``Fence(); Fence()``) and an epoch
    in which rank 0 puts `nbytes` into rank 1's window (``Fence(); Put; Fence()``, every
    rank calling the Fences), over a window made once with ``MPI.Win.Create`` on a NumPy
    array, as in Part A; the fastest of `reps` repetitions of `iters` epochs, per epoch in
    µs (the slowest rank's).

    One Put, not one per rank: the model is one Put's, and the copies of several Puts at
    once would share the memory system (on one core, take turns).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Two ranks or more.
    nbytes : int
        Bytes of the Put (rounded down to whole doubles, at least one).
    iters, reps : int, optional
        The fastest of `reps` (default 7) repetitions of `iters` epochs (default 20)
        counts (:func:`mpilab.timing.best_us`).

    Returns
    -------
    dict
        ``empty_epoch_us`` and ``epoch_us`` (µs per epoch), and ``nbytes`` (the bytes
        put).
    """
    from mpi4py import MPI

    rank = comm.Get_rank()
    n = max(1, nbytes // 8)
    into, out = doubles(n, 0.0), doubles(n)
    win = MPI.Win.Create(into, disp_unit=into.itemsize, comm=comm)
    try:
        def empty():
            win.Fence()
            win.Fence()

        def epoch():
            win.Fence()
            if rank == 0:
                win.Put(out, 1)
            win.Fence()

        return {"empty_epoch_us": best_us(comm, empty, iters, reps),
                "epoch_us": best_us(comm, epoch, iters, reps), "nbytes": 8 * n}
    finally:
        win.Free()


def reference_epoch_us(n_bytes: float, empty_epoch_us: float, beta_MBps: float) -> float:
    """The model: the synchronisation (an empty epoch, both Fences) plus the Put's bytes
    at the bandwidth of a message, ``empty + n / β`` (µs; 1 MB/s is one byte per µs).

    Parameters
    ----------
    n_bytes : float
        Bytes of the Put.
    empty_epoch_us : float
        An empty epoch (``Fence(); Fence()``), in µs.
    beta_MBps : float
        Bandwidth β of a message, in MB/s.

    Returns
    -------
    float
        The epoch's time, in µs.
    """
    return empty_epoch_us + n_bytes / beta_MBps


def epoch_now(ranks: int = 4) -> dict:
    """α and β (a ping-pong), an empty epoch and a Put + Fence epoch of 1 MiB, measured
    (once per grading session) on one rank per core
    (:func:`mpilab.grading.measured.measure`).

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4): one rank per core of these
        (:func:`~mpilab.grading.measured.measuring_ranks`) make every Fence; rank 0
        puts into rank 1.

    Returns
    -------
    dict
        :func:`epoch_times`'s dict (``empty_epoch_us``, ``epoch_us``, ``nbytes``), with
        ``alpha_us``, ``beta_MBps``, ``ranks``, ``cores`` and ``oversubscribed``.
    """
    return measured.with_alpha_beta("epoch", epoch_times, EPOCH_BYTES, nbytes=EPOCH_BYTES,
                                    ranks=ranks)


def _epoch_hint(got, n: float, e: float, b: float) -> str:
    return guessed(got, [
        (n / b, "An epoch costs its synchronisation even when it carries nothing: add the "
                "empty epoch's time."),
        (2 * e + n / b, "The empty epoch is already both Fences (Fence(); Fence()): count "
                        "it once."),
        *unit_slips(e, n, b),
        (e, "The Put's bytes take time too: n / β."),
        (e * n / 8, "The empty epoch is a fixed cost, paid once per epoch, not per double."),
    ], "An epoch with one Put: the empty epoch's time (both Fences) plus n / β (µs, with n "
       "in bytes and β in MB/s).")


def _measured(m: dict) -> str:
    return (f"an empty epoch {m['empty_epoch_us']:.2f} µs; ping-pong: α = {m['alpha_us']:.2f} "
            f"µs, β = {m['beta_MBps']:,.0f} MB/s")


#: Part D: ``epoch_us(n_bytes, empty_epoch_us, beta_MBps)``, against an epoch of 1 MiB.
EPOCH, check_epoch_us, show_epoch = fixed_plus_bytes(
    __name__, "check_epoch_us", "show_epoch", "epoch_us", "empty_epoch_us", "beta_MBps",
    reference=reference_epoch_us, hint=_epoch_hint, now=epoch_now, tolerance=PREDICTION_TOLERANCE,
    case="a Put + Fence epoch of 1 MiB", who="rank 0 puts into rank 1", fixed_is="an empty epoch",
    besides=_measured, shows="the empty epoch, β and a Put + Fence epoch of 1 MiB")
