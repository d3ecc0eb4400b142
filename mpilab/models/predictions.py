"""What a model returns, labelled as a prediction.

A :class:`Prediction` is one predicted time (printed ``prediction: ...``); a fitted model
(:mod:`mpilab.models.hockney`) predicts through :class:`_Predicts`, whose tables carry
``kind == "prediction"`` and the model's label, so a number read off a fit can never pass
for a measurement. :func:`params_label` writes a model's α and β as the figures label
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where a table is made (0.5 s): not by every importer
    import pandas as pd

__all__ = ["Prediction", "params_label"]

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
    import pandas as pd

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
