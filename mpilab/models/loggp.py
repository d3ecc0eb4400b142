"""The LogGP model (Alexandrov et al., 1995) of messages that may follow each other.

:func:`loggp_from` reads its parameters off three measurements (a ping-pong of small
messages, a stream of small and of large ones); a :class:`LogGP` predicts a ping-pong and
a stream of any size, labelled as predictions (:mod:`mpilab.models.predictions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .predictions import _format_bandwidth, _format_us

__all__ = ["LogGP", "loggp_from"]


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
        return self._first_then_per_byte(self.L_2o_us, n)

    def stream_us(self, n):
        """Predicted time per message of a long stream of `n`-byte messages, µs.

        Parameters
        ----------
        n : float or array_like
            As for :meth:`pingpong_us`.

        Returns
        -------
        float or numpy.ndarray
            ``g + (n - 1) G``, in µs: a float for a scalar, an array otherwise.
        """
        return self._first_then_per_byte(self.g_us, n)

    def _first_then_per_byte(self, first_us: float, n):
        """``first_us + (n - 1) G`` for sizes `n` (below 1 counts as 1): float or array."""
        n = np.maximum(np.asarray(n, dtype=float), 1.0)
        t = first_us + (n - 1.0) * self.G_us_per_byte
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
