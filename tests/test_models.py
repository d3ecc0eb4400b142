"""Hockney fits recover known parameters, find a protocol switch, and label predictions.

All data here are synthetic: times generated from known alpha and beta, with seeded
multiplicative (log-normal) noise like that of real medians. Only synthetic data have a
true answer to compare the fit with, and a seed keeps every run identical.
"""

import math

import numpy as np
import pandas as pd
import pytest

from mpilab import models
from mpilab.models import (
    HockneyFit,
    PiecewiseHockney,
    Prediction,
    fit_hockney,
    fit_piecewise,
    fit_records,
)

SIZES = 2 ** np.arange(3, 23)  # 8 B to 4 MiB, as the ping-pong benchmark sweeps them


def hockney(sizes, alpha_us, beta_MBps):
    return alpha_us + np.asarray(sizes, dtype=float) / beta_MBps


def noisy(times, sigma, seed):
    return times * np.random.default_rng(seed).lognormal(0.0, sigma, np.size(times))


def two_protocols(sizes):
    # Eager: 0.3 µs + 3 GB/s up to 4096 B; rendezvous: 2 µs + 10 GB/s from 8192 B.
    sizes = np.asarray(sizes, dtype=float)
    return np.where(sizes <= 4096, hockney(sizes, 0.3, 3000), hockney(sizes, 2.0, 10000))


# --------------------------------------------------------------------------- fit_hockney


def test_exact_data_give_exact_parameters():
    fit = fit_hockney(SIZES, hockney(SIZES, 0.42, 11200))
    assert fit.alpha_us == pytest.approx(0.42, rel=1e-6)
    assert fit.beta_MBps == pytest.approx(11200, rel=1e-6)
    assert fit.rel_rmse < 1e-6
    assert (fit.size_min, fit.size_max) == (8, 4 * 2**20)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_data_recover_alpha_and_beta_within_a_few_percent(seed):
    fit = fit_hockney(SIZES, noisy(hockney(SIZES, 0.42, 11200), 0.02, seed))
    assert fit.alpha_us == pytest.approx(0.42, rel=0.03)
    assert fit.beta_MBps == pytest.approx(11200, rel=0.03)
    assert 0.005 < fit.rel_rmse < 0.04


def test_relative_weighting_keeps_the_latency():
    # An unweighted fit would let the 4 MiB points swamp alpha; the relative one must not.
    times = hockney(SIZES, 0.25, 20000)
    times[-1] *= 1.01
    assert fit_hockney(SIZES, times).alpha_us == pytest.approx(0.25, rel=0.01)


def test_accepts_lists_repeated_sizes_and_zero_bytes():
    sizes = [0, 0, 64, 64, 1024, 1024]
    fit = fit_hockney(sizes, list(hockney(sizes, 1.0, 500)))
    assert fit.alpha_us == pytest.approx(1.0, rel=1e-6)
    assert fit.beta_MBps == pytest.approx(500, rel=1e-6)


def test_flat_times_give_alpha_and_a_huge_finite_beta():
    fit = fit_hockney([8, 16, 32], [2.0, 2.0, 2.0])
    assert fit.alpha_us == pytest.approx(2.0, rel=1e-6)
    assert math.isfinite(fit.beta_MBps) and fit.beta_MBps > 1e6


@pytest.mark.parametrize(
    ("sizes", "times", "match"),
    [
        ([8, 16, 32], [1.0, 2.0], "same length"),
        ([8, 8, 8], [1.0, 1.1, 0.9], "2 distinct"),
        ([8], [1.0], "2 distinct"),
        ([], [], "2 distinct"),
        ([8, 16, 32], [1.0, np.nan, 2.0], "finite and > 0"),
        ([8, 16, 32], [1.0, np.inf, 2.0], "finite and > 0"),
        ([8, 16, 32], [1.0, 0.0, 2.0], "finite and > 0"),
        ([8, 16, 32], [1.0, -1.0, 2.0], "finite and > 0"),
        ([8, -16, 32], [1.0, 1.5, 2.0], "sizes_bytes must be finite and >= 0"),
    ],
)
def test_bad_input_raises_a_readable_value_error(sizes, times, match):
    with pytest.raises(ValueError, match=match):
        fit_hockney(sizes, times)
    with pytest.raises(ValueError, match=match):
        fit_piecewise(sizes, times)


# --------------------------------------------------------------------------- predictions


def test_time_us_is_alpha_plus_n_over_beta():
    fit = HockneyFit(alpha_us=1.0, beta_MBps=1000.0, size_min=8, size_max=2**20, rel_rmse=0.0)
    assert fit.time_us(2000) == pytest.approx(3.0)
    assert isinstance(fit.time_us(2000), float)
    np.testing.assert_allclose(fit.time_us([0, 1000, 4000]), [1.0, 2.0, 5.0])


def test_predict_is_a_labelled_prediction_table():
    fit = HockneyFit(alpha_us=0.42, beta_MBps=11200.0, size_min=8, size_max=2**22, rel_rmse=0.0)
    table = fit.predict([0, 8, 1024, 2**20])
    assert list(table.columns) == ["size_bytes", "t_us", "bandwidth_MBps", "kind", "model"]
    assert (table["kind"] == "prediction").all()
    assert (table["model"] == "Hockney fit: α = 0.42 µs, β = 11.2 GB/s").all()
    assert table["size_bytes"].tolist() == [0, 8, 1024, 2**20]
    np.testing.assert_allclose(table["t_us"], fit.time_us([0, 8, 1024, 2**20]))
    assert table["bandwidth_MBps"].iloc[0] == 0.0
    assert table["bandwidth_MBps"].iloc[3] == pytest.approx(2**20 / fit.time_us(2**20))


def test_predict_one_cannot_be_mistaken_for_a_measurement():
    fit = HockneyFit(alpha_us=0.42, beta_MBps=11200.0, size_min=8, size_max=2**22, rel_rmse=0.0)
    p = fit.predict_one(2**20)
    assert isinstance(p, Prediction)
    assert str(p).startswith("prediction: ")
    assert repr(p) == str(p)
    assert "for 1,048,576 B" in str(p)
    assert str(p).endswith("(Hockney fit: α = 0.42 µs, β = 11.2 GB/s)")
    assert float(p) == pytest.approx(0.42 + 2**20 / 11200)
    assert p.size_bytes == 2**20


def test_predictions_reject_negative_sizes_and_several_sizes_for_one():
    fit = HockneyFit(alpha_us=1.0, beta_MBps=1000.0, size_min=8, size_max=2**20, rel_rmse=0.0)
    with pytest.raises(ValueError, match=">= 0"):
        fit.predict([8, -1])
    with pytest.raises(ValueError, match="one size"):
        fit.predict_one([8, 16])


# --------------------------------------------------------------------------- fit_piecewise


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_piecewise_finds_the_protocol_switch(seed):
    fit = fit_piecewise(SIZES, noisy(two_protocols(SIZES), 0.01, seed))
    assert fit.switch_bytes == 8192
    low, high = fit.segments
    assert low.alpha_us == pytest.approx(0.3, rel=0.1)
    assert low.beta_MBps == pytest.approx(3000, rel=0.1)
    assert high.alpha_us == pytest.approx(2.0, rel=0.1)
    assert high.beta_MBps == pytest.approx(10000, rel=0.1)
    assert (low.size_max, high.size_min) == (4096, 8192)
    assert "bend at 8,192 B" in fit.model


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_one_line_stays_one_segment(seed):
    fit = fit_piecewise(SIZES, noisy(hockney(SIZES, 0.42, 11200), 0.02, seed))
    assert fit.switch_bytes is None
    assert len(fit.segments) == 1
    assert fit.segments[0].alpha_us == pytest.approx(0.42, rel=0.03)


def test_exact_one_line_stays_one_segment():
    # Both fits are exact here; rounding noise must not pass for a better model.
    assert fit_piecewise(SIZES, hockney(SIZES, 0.42, 11200)).switch_bytes is None


def test_too_few_sizes_for_two_segments_give_one():
    sizes = SIZES[:5]  # two segments need 2 x min_points = 6 distinct sizes
    fit = fit_piecewise(sizes, two_protocols(sizes))
    assert fit.switch_bytes is None and len(fit.segments) == 1


def test_min_points_below_two_is_refused():
    with pytest.raises(ValueError, match="min_points"):
        fit_piecewise(SIZES, two_protocols(SIZES), min_points=1)


def test_piecewise_predictions_dispatch_by_size_and_are_labelled():
    fit = fit_piecewise(SIZES, two_protocols(SIZES))
    low, high = fit.segments
    assert fit.time_us(4096) == pytest.approx(low.time_us(4096))
    assert fit.time_us(8192) == pytest.approx(high.time_us(8192))
    np.testing.assert_allclose(
        fit.time_us([64, 2**20]), [low.time_us(64), high.time_us(2**20)]
    )
    table = fit.predict(SIZES)
    assert (table["kind"] == "prediction").all()
    assert (table["model"] == fit.model).all()
    np.testing.assert_allclose(table["t_us"], two_protocols(SIZES), rtol=1e-6)
    p = fit.predict_one(16384)
    assert str(p).startswith("prediction: ")
    assert float(p) == pytest.approx(high.time_us(16384))


def test_piecewise_needs_a_switch_exactly_with_two_segments():
    seg = HockneyFit(alpha_us=1.0, beta_MBps=1000.0, size_min=8, size_max=2**20, rel_rmse=0.0)
    with pytest.raises(ValueError, match="switch_bytes"):
        PiecewiseHockney((seg, seg), None)
    with pytest.raises(ValueError, match="switch_bytes"):
        PiecewiseHockney((seg,), 4096)


# --------------------------------------------------------------------------- fit_records


def records():
    rows = []
    for seed, (impl, transport, times) in enumerate(
        [
            ("openmpi", "shm", two_protocols(SIZES)),
            ("openmpi", "tcp", hockney(SIZES, 20.0, 900)),
            ("mpich", "shm", hockney(SIZES, 0.5, 8000)),
        ]
    ):
        median = noisy(times, 0.01, seed)
        rows.append(
            pd.DataFrame(
                {
                    "size_bytes": SIZES,
                    "t_us_min": median * 0.97,
                    "t_us_median": median,
                    "impl": impl,
                    "transport": transport,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def test_fit_records_fits_each_group():
    fits = fit_records(records(), by=["impl", "transport"])
    assert set(fits) == {("openmpi", "shm"), ("openmpi", "tcp"), ("mpich", "shm")}
    assert fits[("openmpi", "shm")].switch_bytes == 8192
    assert fits[("openmpi", "tcp")].switch_bytes is None
    assert fits[("openmpi", "tcp")].segments[0].alpha_us == pytest.approx(20.0, rel=0.03)
    assert fits[("mpich", "shm")].segments[0].beta_MBps == pytest.approx(8000, rel=0.03)


def test_fit_records_single_column_none_and_plain_fits():
    df = records()
    by_transport = fit_records(df[df["impl"] == "openmpi"], by="transport", piecewise=False)
    assert set(by_transport) == {"shm", "tcp"}
    assert all(isinstance(f, HockneyFit) for f in by_transport.values())
    tcp = df[df["transport"] == "tcp"]
    whole = fit_records(tcp, time="t_us_min")
    assert list(whole) == [None]
    assert whole[None].segments[0].alpha_us == pytest.approx(20.0 * 0.97, rel=0.03)


def test_fit_records_names_a_missing_column_and_a_bad_group():
    df = records()
    with pytest.raises(ValueError, match="t_us_q1"):
        fit_records(df, time="t_us_q1")
    df.loc[(df["impl"] == "mpich") & (df["size_bytes"] == 64), "t_us_median"] = np.nan
    with pytest.raises(ValueError, match=r"cannot fit group \('mpich', 'shm'\)"):
        fit_records(df, by=["impl", "transport"])


def test_loggp_from_three_times_predicts_alone_and_in_a_stream():
    """L + 2o from half a round trip, g and G from a stream at two sizes; one message
    alone costs L + 2o + (n - 1) G, each of a stream g + (n - 1) G."""
    # made-up machine: L + 2o = 0.2 µs, g = 0.08 µs, 1/G = 10 GB/s (1e-4 µs per byte)
    G = 1e-4
    m = models.loggp_from(0.2 + 7 * G, 0.08 + 7 * G, 0.08 + (1048576 - 1) * G, 8, 1048576)
    assert m.L_2o_us == pytest.approx(0.2) and m.g_us == pytest.approx(0.08)
    assert m.G_us_per_byte == pytest.approx(G) and m.bandwidth_MBps == pytest.approx(1e4)
    assert m.pingpong_us(65536) == pytest.approx(0.2 + 65535 * G)
    assert m.stream_us(65536) == pytest.approx(0.08 + 65535 * G)
    assert list(m.stream_us([1, 8])) == pytest.approx([0.08, 0.08 + 7 * G])
    assert m.model.startswith("LogGP from measurements: L + 2o = ")
    # a stream no slower at 1 MiB than at 8 B: no per-byte cost is seen, never a negative
    assert models.loggp_from(1.0, 0.5, 0.4, 8, 1024).G_us_per_byte == 0
    with pytest.raises(ValueError, match="n_small < n_large"):
        models.loggp_from(1.0, 0.5, 2.0, 1024, 8)
    with pytest.raises(ValueError, match="positive time"):
        models.loggp_from(-1.0, 0.5, 2.0, 8, 1024)


def test_cache_betas_fit_each_side_of_the_cache_on_its_own_sizes():
    """Below the cache the copies run at 20 GB/s, above it at 8 GB/s: each line recovers
    its own rate from its own sizes, the sizes in between are used by neither, and a
    range with fewer than two sizes gives no line."""
    cache = 64 << 20
    sizes = np.array([2**k for k in range(3, 29)], dtype=float)  # 8 B .. 256 MiB
    fast = 5.0 + sizes / 20_000.0
    slow = 5.0 + sizes / 8_000.0
    times = np.where(sizes >= cache, slow, fast)
    got = models.fit_cache_betas(sizes, times, cache)
    inside, outside = got["in-cache"], got["off-cache"]
    assert inside.beta_MBps == pytest.approx(20_000, rel=1e-3)
    assert outside.beta_MBps == pytest.approx(8_000, rel=1e-3)
    assert (inside.size_min, inside.size_max) == (1 << 16, 16 << 20)  # 4 x 16 MiB fit
    assert (outside.size_min, outside.size_max) == (64 << 20, 256 << 20)
    below = models.fit_cache_betas(sizes[sizes < cache], times[sizes < cache], cache)
    assert below["off-cache"] is None and below["in-cache"] is not None
    with pytest.raises(ValueError, match="cache_bytes"):
        models.fit_cache_betas(sizes, times, 0)


def test_the_last_level_cache_is_read_from_the_machine():
    from mpilab import runtime

    got = runtime.last_level_cache()
    if got is None:
        pytest.skip("this system does not report its caches")
    level, size = got
    assert level >= 1 and size >= 1 << 10
    l1 = open("/sys/devices/system/cpu/cpu0/cache/index0/size").read().strip()
    assert size >= int(l1.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}[l1[-1]]
