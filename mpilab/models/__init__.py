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

The package is split by concern, and re-exports every name (``models.fit_records``,
``models.Prediction`` are as before): what a model returns and how it is labelled
(:mod:`~mpilab.models.predictions`), the Hockney fits (:mod:`~mpilab.models.hockney`) and
LogGP (:mod:`~mpilab.models.loggp`).
"""

from __future__ import annotations

from .hockney import (
    HockneyFit,
    PiecewiseHockney,
    fit_cache_betas,
    fit_hockney,
    fit_piecewise,
    fit_records,
)
from .loggp import LogGP, loggp_from
from .predictions import Prediction, params_label

__all__ = [
    "HockneyFit",
    "LogGP",
    "PiecewiseHockney",
    "Prediction",
    "fit_cache_betas",
    "fit_hockney",
    "fit_piecewise",
    "fit_records",
    "loggp_from",
    "params_label",
]
