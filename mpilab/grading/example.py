"""Lab 08's recipe, worked: the checks of a lab, in the shapes every lab's checks use.

This module is the template ARCHITECTURE.md's "Where does lab 08 go?" points at, and
tests/test_lab08_recipe.py grades a made-up notebook with it end to end (generated,
released, autograded, feedback). It has the two kinds of graded part a lab has:

* a **graded function**: ``rank_sum(comm)`` returns, on every rank, the sum over the ranks
  of ``rank + 1``; :func:`check_rank_sum` runs the student's function on sandboxed MPI
  ranks (:func:`mpilab.grading.run_on_ranks`) at two sizes and compares every rank's
  result with the serial answer (:func:`mpilab.grading.expect_per_rank`);
* a **graded prediction**, declared as data (:data:`MESSAGE`, a
  :class:`~mpilab.grading.prediction.Prediction`): ``message_us(n_bytes, alpha_us,
  beta_MBps)``, Hockney's α + n / β, against the model on made-up cases, then against a
  message of 4 MiB measured just now, from α (8 B) and β (1 MiB) measured in the same
  run (:func:`mpilab.pingpong.one_way_times`).

A lab's test cells call ``check_X(the_students_function, ...)``; its try-it cells
``show_X(...)``.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import pingpong
from . import measured
from .compare import expect_per_rank
from .prediction import Part, Prediction, guessed, shown, where
from .running import run_on_ranks

__all__ = ["check_rank_sum", "reference_message_us", "message_now", "MESSAGE",
           "check_message_us", "show_message"]

#: The measured message may take this many times the prediction: the line through 8 B and
#: 1 MiB is straight, the machine's cost per byte is not (pages and caches change it
#: between the sizes: lab 01 measured 1.16-1.99 at 4 MiB alone on 2 cores). A size below
#: 1 MiB would be worse: 256 KiB, in cache, measured 0.19 times the line here. Wide, as
#: an example's should be; a lab sets its own from the error-rate bench (issue 26).
TOLERANCE = (0.3, 4.0)
SIZES = (8, 1 << 20, 4 << 20)  # α, β, and the held-out size the prediction is graded at


def check_rank_sum(rank_sum: Callable, *, sizes=(2, 3)) -> None:
    """``rank_sum(comm)`` returns 1 + 2 + ... + p on every one of p ranks.

    Parameters
    ----------
    rank_sum : callable
        The student's function, ``rank_sum(comm) -> int``.
    sizes : sequence of int, optional
        The numbers of ranks to run it on (default 2, then 3), 10 s each.

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the wrong ranks, or what stopped the run (a timeout, an exception).
    """
    __tracebackhide__ = True
    for p in sizes:
        got = run_on_ranks(rank_sum, ranks=p, timeout=10)
        expect_per_rank(got, [p * (p + 1) // 2] * p, "returned", label=f"rank_sum on {p} ranks")


def reference_message_us(n_bytes: float, alpha_us: float, beta_MBps: float) -> float:
    """Hockney's model: α + n / β (µs; 1 MB/s is one byte per µs).

    Parameters
    ----------
    n_bytes : float
        Message size, in bytes.
    alpha_us, beta_MBps : float
        Hockney's latency α (µs) and bandwidth β (MB/s), as in
        :class:`mpilab.models.hockney.HockneyFit`.

    Returns
    -------
    float
        The one-way time of the message, in µs.
    """
    return alpha_us + n_bytes / beta_MBps


def _hint(got, n: float, a: float, b: float) -> str:
    return guessed(got, [(n / b, "A message costs α even with no bytes: add it."),
                         (a + n / b * 1e6, "1 MB/s is one byte per µs: n / β is in µs."),
                         (a, "The bytes take time too: n / β.")],
                   "α plus the bytes' time, n / β (µs).")


def message_now(ranks: int = 2) -> dict:
    """One-way times of 8 B, 1 MiB and 4 MiB, measured once per grading session, with α
    and β from the first two.

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 2); the ping-pong uses ranks 0 and 1.

    Returns
    -------
    dict
        :func:`mpilab.grading.measured.measure`'s dict of
        :func:`~mpilab.pingpong.one_way_times` (``sizes``, ``t_us``, ``ranks``,
        ``cores``, ``oversubscribed``), plus ``alpha_us`` (µs), ``beta_MBps`` (MB/s) and
        ``held_out_us`` (the 4 MiB one-way time, µs).
    """
    m = measured.measure("example-message", pingpong.one_way_times, list(SIZES),
                         ranks=ranks)
    alpha, t_big, t_held = m["t_us"]
    return {**m, "alpha_us": alpha, "beta_MBps": SIZES[1] / max(t_big - alpha, 1e-3),
            "held_out_us": t_held}


def _lines(func: Callable, m: dict, ranks: int) -> None:
    print(f"a message of {SIZES[2]:,} B on {where(m)}: measured {m['held_out_us']:.1f} µs, "
          f"predicted {shown(func, SIZES[2], m['alpha_us'], m['beta_MBps']).strip()}")


MESSAGE = Prediction(
    name="message_us", reference=reference_message_us, hint=_hint, now=message_now,
    tolerance=TOLERANCE, shows=_lines,
    parts=lambda m: [Part(f"a message of {SIZES[2]:,} B between two ranks",
                          (SIZES[2], m["alpha_us"], m["beta_MBps"]), m["held_out_us"])],
    model=lambda m: (f"α = {m['alpha_us']:.3g} µs and β = {m['beta_MBps']:,.0f} MB/s, "
                     f"measured just now on {where(m)}"))


check_message_us, show_message = MESSAGE.cells(
    __name__, "check_message_us", "show_message", "message_us(n_bytes, alpha_us, beta_MBps)",
    against="a message of 4 MiB", shows="the message of 4 MiB", ranks=2,
    cases=((0, 2.0, 1000.0), (1e6, 1.5, 5000.0)))
