"""Hockney and LogGP models of point-to-point time, from measurements, and their predictions.

The Hockney model says a message of ``n`` bytes takes ``t(n) = alpha + n / beta``: a
fixed latency ``alpha`` plus the time to stream ``n`` bytes at an asymptotic bandwidth
``beta``. Real MPI libraries switch protocol (eager to rendezvous) at some size, which
shows as a second line with a larger ``alpha``: :func:`fit_piecewise` finds it.

Units follow the measurement records: sizes in bytes, times in microseconds, bandwidths
in MB/s (1 MB = 1e6 bytes), so ``n / beta`` in B / (MB/s) is already in µs.

Everything a model returns is labelled as a prediction (``kind == "prediction"`` and a
``model`` label in every table, ``"prediction: ..."`` when printed), so a number read
off a fit can never pass for a measurement.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

__all__ = [
    "HockneyFit",
    "LogGP",
    "PiecewiseHockney",
    "Prediction",
    "fit_hockney",
    "fit_piecewise",
    "fit_records",
    "loggp_from",
]

# Relative residuals below one part per million are rounding noise, not signal (no timer
# is that precise). Flooring the residual variance there stops the model comparison from
# choosing between two fits that are both exact.
_RESIDUAL_FLOOR = 1e-6
# Kass & Raftery (1995): a BIC difference above 10 is "very strong" evidence.
_BIC_MARGIN = 10.0
# Lower bound on 1/beta (µs per byte): keeps beta finite (at most 1e12 MB/s) even for
# times that do not grow with size.
_MIN_INV_BETA = 1e-12


# --------------------------------------------------------------------------- labels


def _format_us(t: float) -> str:
    return f"{t:,.0f} µs" if abs(t) >= 100 else f"{t:.3g} µs"


def _format_bandwidth(mbps: float) -> str:
    return f"{mbps / 1e3:.3g} GB/s" if mbps >= 1e3 else f"{mbps:.3g} MB/s"


def params_label(alpha_us: float, beta_MBps: float) -> str:
    """``α = 1 µs, β = 1 GB/s``: a model's parameters as the figures label them.

    Parameters
    ----------
    alpha_us : float
        Latency, µs.
    beta_MBps : float
        Bandwidth, MB/s.

    Returns
    -------
    str
        Both with their units scaled for reading.
    """
    return f"α = {_format_us(alpha_us)}, β = {_format_bandwidth(beta_MBps)}"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, repr=False)
class Prediction:
    """One predicted one-way time, printed so that it cannot pass for a measurement.

    Attributes
    ----------
    t_us : float
        Predicted one-way time in µs.
    size_bytes : int
        Message size the prediction is for.
    model : str
        Label of the model that made it.

    Examples
    --------
    >>> p = Prediction(12.3, 1048576, "Hockney fit: α = 0.42 µs, β = 11.2 GB/s")
    >>> print(p)
    prediction: 12.3 µs for 1,048,576 B (Hockney fit: α = 0.42 µs, β = 11.2 GB/s)
    >>> float(p)
    12.3
    """

    t_us: float
    size_bytes: int
    model: str

    def __float__(self) -> float:
        return float(self.t_us)

    def __str__(self) -> str:
        return f"prediction: {_format_us(self.t_us)} for {self.size_bytes:,} B ({self.model})"

    __repr__ = __str__


def _prediction_table(sizes: np.ndarray, t_us: np.ndarray, model: str) -> pd.DataFrame:
    with np.errstate(divide="ignore", invalid="ignore"):
        bandwidth = np.where(sizes > 0, sizes / t_us, 0.0)  # B/µs == MB/s
    return pd.DataFrame(
        {
            "size_bytes": sizes.astype(np.int64),
            "t_us": t_us,
            "bandwidth_MBps": bandwidth,
            "kind": "prediction",
            "model": model,
        }
    )


def _as_sizes(sizes, name: str = "sizes") -> np.ndarray:
    n = np.atleast_1d(np.asarray(sizes, dtype=float))
    if n.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {n.shape}")
    bad = ~np.isfinite(n) | (n < 0)
    if bad.any():
        raise ValueError(f"{name} must be finite and >= 0 bytes; got {n[bad].tolist()}")
    return n


class _Predicts:
    """Predictions from a model's ``time_us`` and ``model`` label (both fit classes)."""

    def predict(self, sizes) -> pd.DataFrame:
        """Predicted times and bandwidths for the given message sizes.

        Parameters
        ----------
        sizes : array_like of int
            Message sizes in bytes.

        Returns
        -------
        pandas.DataFrame
            Columns ``size_bytes``, ``t_us``, ``bandwidth_MBps``, ``kind`` (always
            ``"prediction"``) and ``model`` (this fit's label).
        """
        n = _as_sizes(sizes)
        return _prediction_table(n, self.time_us(n), self.model)

    def predict_one(self, n) -> Prediction:
        """The predicted time for one message size, as a labelled :class:`Prediction`."""
        size = _as_sizes(n, "n")
        if size.size != 1:
            raise ValueError(f"predict_one takes one size, got {size.size}; use predict()")
        return Prediction(self.time_us(size[0]), int(size[0]), self.model)


@dataclass(frozen=True)
class HockneyFit(_Predicts):
    """A Hockney model ``t(n) = alpha + n / beta`` fitted to measured times.

    Attributes
    ----------
    alpha_us : float
        Latency: the time of an empty message, in µs.
    beta_MBps : float
        Asymptotic bandwidth, in MB/s (1 MB = 1e6 bytes).
    size_min, size_max : int
        Range of message sizes (bytes) the model was fitted on; outside it, the
        prediction is an extrapolation.
    rel_rmse : float
        Root mean square of the relative residuals ``(t_model - t) / t``: 0.05 means the
        model is typically 5 % off the measurements.
    """

    alpha_us: float
    beta_MBps: float
    size_min: int
    size_max: int
    rel_rmse: float

    @property
    def model(self) -> str:
        """Human label, e.g. ``"Hockney fit: α = 0.42 µs, β = 11.2 GB/s"``."""
        return f"Hockney fit: {params_label(self.alpha_us, self.beta_MBps)}"

    def time_us(self, n):
        """Model time in µs for ``n`` bytes: a float for a scalar, an array otherwise.

        Parameters
        ----------
        n : float or array_like
            Message size(s), in bytes.

        Returns
        -------
        float or numpy.ndarray
            ``alpha_us + n / beta_MBps``, in µs, shaped like `n`.
        """
        t = self.alpha_us + np.asarray(n, dtype=float) / self.beta_MBps
        return float(t) if t.ndim == 0 else t


@dataclass(frozen=True)
class PiecewiseHockney(_Predicts):
    """One Hockney line per protocol: below and from the size where the protocol switches.

    Attributes
    ----------
    segments : tuple of HockneyFit
        One fit, or two ordered by size.
    switch_bytes : int or None
        First message size of the upper segment, where the data bend; None when the
        data are one line. A bend may be the eager-to-rendezvous switch, or another
        change of path (a single-copy mechanism, the page size, a cache size): compare it
        with the library's eager limit before calling it a protocol switch.
    """

    segments: tuple[HockneyFit, ...]
    switch_bytes: int | None

    def __post_init__(self):
        if len(self.segments) not in (1, 2):
            raise ValueError(f"expected 1 or 2 segments, got {len(self.segments)}")
        if (len(self.segments) == 2) != (self.switch_bytes is not None):
            raise ValueError("switch_bytes must be given exactly when there are 2 segments")

    @property
    def size_min(self) -> int:
        """Smallest message size fitted, in bytes."""
        return self.segments[0].size_min

    @property
    def size_max(self) -> int:
        """Largest message size fitted, in bytes."""
        return self.segments[-1].size_max

    @property
    def model(self) -> str:
        """Human label giving both segments and the switch size."""
        if self.switch_bytes is None:
            return self.segments[0].model
        low, high = self.segments
        return (
            f"Hockney fit with a bend at {self.switch_bytes:,} B: "
            f"{params_label(low.alpha_us, low.beta_MBps)} below it; "
            f"{params_label(high.alpha_us, high.beta_MBps)} from it"
        )

    def time_us(self, n):
        """Model time in µs for ``n`` bytes, taken from the segment ``n`` falls in.

        Parameters
        ----------
        n : float or array_like
            Message size(s), in bytes; sizes from ``switch_bytes`` up use the upper
            segment.

        Returns
        -------
        float or numpy.ndarray
            The model time, in µs: a float for a scalar, an array shaped like `n`
            otherwise.
        """
        n_arr = np.asarray(n, dtype=float)
        if self.switch_bytes is None:
            t = self.segments[0].time_us(n_arr)
        else:
            low, high = self.segments
            t = np.where(n_arr < self.switch_bytes, low.time_us(n_arr), high.time_us(n_arr))
        t = np.asarray(t, dtype=float)
        return float(t) if t.ndim == 0 else t


# --------------------------------------------------------------------------- fitting


def _check_data(sizes_bytes, times_us) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(sizes_bytes, dtype=float).ravel()
    t = np.asarray(times_us, dtype=float).ravel()
    if n.shape != t.shape:
        raise ValueError(
            f"sizes_bytes and times_us must have the same length, got {n.size} and {t.size}"
        )
    bad = ~np.isfinite(n) | (n < 0)
    if bad.any():
        raise ValueError(f"sizes_bytes must be finite and >= 0; got {n[bad].tolist()}")
    bad = ~np.isfinite(t) | (t <= 0)
    if bad.any():
        raise ValueError(
            f"times_us must be finite and > 0; got {t[bad].tolist()} "
            f"at positions {np.flatnonzero(bad).tolist()}"
        )
    if np.unique(n).size < 2:
        raise ValueError(
            f"a Hockney fit needs at least 2 distinct message sizes, got {np.unique(n).tolist()}"
        )
    return n, t


def _fit(n: np.ndarray, t: np.ndarray) -> HockneyFit:
    # In (alpha, 1/beta) the model is linear, so the weighted least-squares problem is
    # convex with one minimum: the initial guess only saves iterations.
    lo, hi = n.min(), n.max()
    t_lo, t_hi = np.median(t[n == lo]), np.median(t[n == hi])
    inv_beta0 = max((t_hi - t_lo) / (hi - lo), 1e-3 * t_hi / hi, 2 * _MIN_INV_BETA)
    alpha0 = max(t_lo - inv_beta0 * lo, 1e-3 * t_lo)
    design = np.column_stack([1.0 / t, n / t])  # relative residual = design @ p - 1

    result = least_squares(
        lambda p: design @ p - 1.0,
        x0=[alpha0, inv_beta0],
        jac=lambda p: design,
        bounds=([0.0, _MIN_INV_BETA], [np.inf, np.inf]),
        x_scale=[alpha0, inv_beta0],
        method="trf",
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
    )
    alpha, inv_beta = result.x
    residuals = design @ result.x - 1.0
    return HockneyFit(
        alpha_us=float(alpha),
        beta_MBps=float(1.0 / inv_beta),
        size_min=int(lo),
        size_max=int(hi),
        rel_rmse=float(np.sqrt(np.mean(residuals**2))),
    )


def _sse(fit: HockneyFit, n: np.ndarray, t: np.ndarray) -> float:
    return float(np.sum((fit.time_us(n) / t - 1.0) ** 2))


def fit_hockney(sizes_bytes, times_us) -> HockneyFit:
    """Fit ``t(n) = alpha + n / beta`` to measured times, on relative error.

    Each point's residual is divided by its measured time, so an 8 B message at 0.4 µs
    and a 4 MiB message at 400 µs weigh the same: an unweighted fit would ignore the
    latency entirely. The fit is solved with ``scipy.optimize.least_squares`` under the
    bounds ``alpha >= 0`` and ``beta > 0``, starting from the line through the smallest
    and the largest size.

    Parameters
    ----------
    sizes_bytes : array_like
        Message sizes in bytes (>= 0); sizes may repeat.
    times_us : array_like
        One-way times in µs (> 0), one per size.

    Returns
    -------
    HockneyFit

    Raises
    ------
    ValueError
        If the lengths differ, fewer than 2 distinct sizes are given, a time is not
        finite or not positive, or a size is negative.
    """
    n, t = _check_data(sizes_bytes, times_us)
    return _fit(n, t)


def _bic(sse: float, n_points: int, n_params: int) -> float:
    sse = max(sse, n_points * _RESIDUAL_FLOOR**2)
    return n_points * np.log(sse / n_points) + n_params * np.log(n_points)


def fit_piecewise(sizes_bytes, times_us, *, min_points: int = 3) -> PiecewiseHockney:
    """Fit one or two Hockney lines, finding where the MPI protocol switches.

    Every breakpoint that leaves at least ``min_points`` distinct sizes on each side is
    tried; each side gets its own :func:`fit_hockney` and the breakpoint with the lowest
    total relative sum of squares wins. Two lines are kept only when they explain the
    data clearly better than one, by the Bayesian information criterion: with
    multiplicative Gaussian noise (relative residuals, which are log-residuals to first
    order), ``BIC = N ln(SSE / N) + k ln N`` with ``k = 2`` for one line and ``k = 5``
    for two (two alphas, two betas, the breakpoint). Two lines win when their BIC is
    lower by more than 10, "very strong" evidence on Kass and Raftery's scale. The BIC
    penalty grows with the number of points, so a handful of noisy sizes never splits.

    Parameters
    ----------
    sizes_bytes : array_like
        Message sizes in bytes (>= 0); sizes may repeat.
    times_us : array_like
        One-way times in µs (> 0), one per size.
    min_points : int, optional
        Fewest distinct sizes a segment may have (at least 2).

    Returns
    -------
    PiecewiseHockney
        Two segments and ``switch_bytes`` (the first size of the upper segment), or one
        segment and ``switch_bytes=None`` when one line is enough or there are too few
        sizes to try two.

    Raises
    ------
    ValueError
        For the same bad inputs as :func:`fit_hockney`, or ``min_points < 2``.
    """
    if min_points < 2:
        raise ValueError(f"min_points must be at least 2 (a line needs 2 sizes), got {min_points}")
    n, t = _check_data(sizes_bytes, times_us)
    one = _fit(n, t)
    distinct = np.unique(n)
    candidates = distinct[min_points : distinct.size - min_points + 1]
    if candidates.size == 0:
        return PiecewiseHockney((one,), None)

    best = None
    for switch in candidates:
        low, high = n < switch, n >= switch
        pair = (_fit(n[low], t[low]), _fit(n[high], t[high]))
        sse = _sse(pair[0], n[low], t[low]) + _sse(pair[1], n[high], t[high])
        if best is None or sse < best[0]:
            best = (sse, int(switch), pair)

    sse_two, switch, pair = best
    if _bic(_sse(one, n, t), n.size, 2) - _bic(sse_two, n.size, 5) > _BIC_MARGIN:
        return PiecewiseHockney(pair, switch)
    return PiecewiseHockney((one,), None)


def fit_records(
    df: pd.DataFrame,
    *,
    by: str | Sequence[str] | None = None,
    piecewise: bool = True,
    time: str = "t_us_median",
) -> dict[Hashable, HockneyFit | PiecewiseHockney]:
    """Fit a model to each group of a tidy table of measurements.

    Parameters
    ----------
    df : pandas.DataFrame
        Measurement records with a ``size_bytes`` column and the ``time`` column.
    by : str or list of str, optional
        Columns to group by, e.g. ``["impl", "transport"]``. None fits all rows at once.
    piecewise : bool, optional
        Use :func:`fit_piecewise` (default) rather than :func:`fit_hockney`.
    time : str, optional
        Column of one-way times in µs to fit.

    Returns
    -------
    dict
        ``{group_key: fit}``, keys as pandas ``groupby`` gives them: a value for a single
        column, a tuple for a list of columns, None when ``by`` is None.

    Raises
    ------
    ValueError
        If a column is missing, or a group cannot be fitted (the message names it).
    """
    by_cols = [] if by is None else [by] if isinstance(by, str) else list(by)
    missing = [c for c in ["size_bytes", time, *by_cols] if c not in df.columns]
    if missing:
        raise ValueError(f"df has no column {missing}; it has {list(df.columns)}")
    fit = fit_piecewise if piecewise else fit_hockney
    groups = [(None, df)] if by is None else df.groupby(by, sort=True)
    fits = {}
    for key, group in groups:
        try:
            fits[key] = fit(group["size_bytes"].to_numpy(), group[time].to_numpy())
        except ValueError as exc:
            raise ValueError(f"cannot fit group {key!r}: {exc}") from exc
    return fits


# --------------------------------------------------------------------------- LogGP


@dataclass(frozen=True)
class LogGP:
    """The LogGP model (Alexandrov et al., 1995) of messages that may follow each other.

    Hockney's ``alpha + n / beta`` prices one message alone. LogP and LogGP split that
    price by who pays it: ``L`` the latency of the network or memory (a message in
    flight does not stop the sender), ``o`` the overhead each side's processor spends on
    a message, ``g`` the gap: the least time between two messages a rank injects (the
    inverse of the message rate), and ``G`` the gap per byte of a long message (the
    inverse of the bandwidth). So one message alone takes ``L + 2o + (n - 1) G`` (a
    ping-pong's half round trip), but a stream of them costs each only
    ``g + (n - 1) G``: the latencies of successive messages overlap.

    Derived here from three measurements, not fitted: half a round trip of a small
    message, and the per-message times of a stream (osu_bw's window) of small and of
    large messages. ``L`` and ``o`` are not separated by these (that needs the time of
    the send call itself), so the model carries ``L + 2o`` as one figure.

    Attributes
    ----------
    L_2o_us : float
        ``L + 2o`` in µs.
    g_us : float
        Gap between messages, µs.
    G_us_per_byte : float
        Gap per byte, µs/B (1 / G is a bandwidth: ``bandwidth_MBps``).
    """

    L_2o_us: float
    g_us: float
    G_us_per_byte: float

    @property
    def bandwidth_MBps(self) -> float:
        """1 / G in MB/s."""
        return 1.0 / self.G_us_per_byte if self.G_us_per_byte > 0 else float("inf")

    @property
    def model(self) -> str:
        return (f"LogGP from measurements: L + 2o = {_format_us(self.L_2o_us)}, "
                f"g = {_format_us(self.g_us)}, 1/G = {_format_bandwidth(self.bandwidth_MBps)}")

    def pingpong_us(self, n):
        """Predicted one-way time of one message alone (half a round trip), µs.

        Parameters
        ----------
        n : float or array_like
            Message size(s), in bytes (below 1 counts as 1).

        Returns
        -------
        float or numpy.ndarray
            ``L + 2o + (n - 1) G``, in µs: a float for a scalar, an array otherwise.
        """
        n = np.maximum(np.asarray(n, dtype=float), 1.0)
        t = self.L_2o_us + (n - 1.0) * self.G_us_per_byte
        return float(t) if t.ndim == 0 else t

    def stream_us(self, n):
        """Predicted time per message of a long stream of `n`-byte messages, µs.

        Parameters
        ----------
        n : float or array_like
            Message size(s), in bytes (below 1 counts as 1).

        Returns
        -------
        float or numpy.ndarray
            ``g + (n - 1) G``, in µs: a float for a scalar, an array otherwise.
        """
        n = np.maximum(np.asarray(n, dtype=float), 1.0)
        t = self.g_us + (n - 1.0) * self.G_us_per_byte
        return float(t) if t.ndim == 0 else t


def loggp_from(pingpong_small_us: float, stream_small_us: float, stream_large_us: float,
               n_small: int, n_large: int) -> LogGP:
    """LogGP parameters from three measured times (µs) at two sizes (bytes).

    ``G`` is the slope of the stream's per-message time between the sizes, ``g`` the
    stream's small-message time less its bytes, ``L + 2o`` the ping-pong's small-message
    time less its bytes. ValueError for sizes out of order or times that are not
    positive; a stream slower at the small size than at the large one gives ``G = 0``
    (no per-byte cost seen), never a negative one.

    Parameters
    ----------
    pingpong_small_us : float
        Half a round trip of an `n_small`-byte message, µs (> 0).
    stream_small_us, stream_large_us : float
        Per-message time of a stream (osu_bw's window) of `n_small`- and of
        `n_large`-byte messages, µs (> 0).
    n_small, n_large : int
        The two message sizes, in bytes (``1 <= n_small < n_large``).

    Returns
    -------
    LogGP
        The model; ``L_2o_us`` and ``g_us`` are never below 0.

    Raises
    ------
    ValueError
        A time that is not finite and positive, or sizes out of order.
    """
    for name, v in (("pingpong_small_us", pingpong_small_us),
                    ("stream_small_us", stream_small_us), ("stream_large_us", stream_large_us)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive time in µs, got {v!r}")
    if not 1 <= int(n_small) < int(n_large):
        raise ValueError(f"need 1 <= n_small < n_large, got {n_small} and {n_large}")
    G = max(0.0, (stream_large_us - stream_small_us) / (int(n_large) - int(n_small)))
    small = (int(n_small) - 1) * G
    return LogGP(L_2o_us=max(pingpong_small_us - small, 0.0),
                 g_us=max(stream_small_us - small, 0.0), G_us_per_byte=G)
