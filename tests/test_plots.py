"""latency_bandwidth draws two log-log panels and labels every model as a prediction.

The measurements are synthetic (two known Hockney lines with seeded noise): the figure's
structure is under test here, not any machine's numbers.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from mpilab.models import fit_hockney, fit_records  # noqa: E402
from mpilab.plots import format_bytes, latency_bandwidth  # noqa: E402

SIZES = 2 ** np.arange(0, 23)


def records(with_spread=True):
    rng = np.random.default_rng(0)
    rows = []
    for transport, alpha, beta in [("shm", 0.3, 8000.0), ("tcp", 20.0, 900.0)]:
        t = (alpha + SIZES / beta) * rng.lognormal(0.0, 0.01, SIZES.size)
        frame = pd.DataFrame(
            {"size_bytes": SIZES, "t_us_median": t, "impl": "openmpi", "transport": transport}
        )
        if with_spread:
            frame["t_us_q1"], frame["t_us_q3"] = 0.97 * t, 1.05 * t
        rows.append(frame)
    return pd.concat(rows, ignore_index=True)


def legend_text(fig):
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return " | ".join(t.get_text() for leg in legends for t in leg.get_texts())


def check_panels(fig):
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    fig.canvas.draw()  # formatters and layout run without error under Agg


def test_two_log_log_panels_without_predictions():
    fig = latency_bandwidth(records())
    check_panels(fig)
    text = legend_text(fig)
    assert "shm" in text and "tcp" in text
    assert "prediction" not in text
    left, right = fig.axes
    assert "µs" in left.get_ylabel() and "MB/s" in right.get_ylabel()
    assert len(left.get_lines()) == 2 and len(right.get_lines()) == 2


def test_fits_are_overlaid_and_labelled_as_fits():
    df = records()
    fits = fit_records(df, by="transport", piecewise=False)
    fig = latency_bandwidth(df, fits=fits, title="synthetic")
    check_panels(fig)
    text = legend_text(fig)
    for fit in fits.values():
        assert f"{fit.model} (fitted to these points)" in text
    assert "prediction" not in text  # a least-squares line is not a prediction
    assert "eager → rendezvous" not in text
    dashed = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 2
    assert fig.get_suptitle() == "synthetic"


def test_a_legend_of_many_entries_stays_shorter_than_the_plots():
    """Issue 28 §1b: lecture 07's figure had nine entries in one column, taller than its
    two plots; drawn, the legend is less than half an axes high."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    df = pd.concat([records().assign(transport=f"{t}{k}") for k in range(2)
                    for t in ("shm", "tcp")])
    fits = fit_records(df, by="transport", piecewise=False)
    fig = latency_bandwidth(df, fits=fits)
    FigureCanvasAgg(fig).draw()
    legend, = fig.legends
    assert len(legend.get_texts()) >= 9
    renderer = fig.canvas.get_renderer()
    assert (legend.get_window_extent(renderer).height
            < 0.5 * fig.axes[0].get_window_extent(renderer).height)


def test_a_protocol_switch_is_marked():
    sizes = SIZES.astype(float)
    t = np.where(sizes <= 4096, 0.3 + sizes / 3000, 2.0 + sizes / 10000)
    df = pd.DataFrame({"size_bytes": SIZES, "t_us_median": t, "transport": "shm"})
    fits = fit_records(df, by="transport")
    assert fits["shm"].switch_bytes == 8192
    fig = latency_bandwidth(df, fits=fits)
    assert "bend found by the two-line fit at 8 KiB" in legend_text(fig)
    assert any(
        ln.get_linestyle() == ":" and ln.get_xdata()[0] == 8192 for ln in fig.axes[0].get_lines()
    )


def test_one_group_without_spread_and_a_single_fit():
    df = records(with_spread=False)
    df = df[df["transport"] == "tcp"]
    fig = latency_bandwidth(df, by=None)
    check_panels(fig)
    assert "prediction" not in legend_text(fig)
    assert not fig.axes[0].collections  # no shaded band without q1/q3

    fit = fit_hockney(df["size_bytes"], df["t_us_median"])
    fig = latency_bandwidth(df, by=None, fits=fit)
    check_panels(fig)
    assert f"{fit.model} (fitted to these points)" in legend_text(fig)


def test_spread_is_shaded_when_quartiles_are_present():
    fig = latency_bandwidth(records())
    assert len(fig.axes[0].collections) == 2 and len(fig.axes[1].collections) == 2


def test_size_ticks_are_readable():
    fig = latency_bandwidth(records())
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "1 KiB" in labels and "1 MiB" in labels
    assert all(label.endswith("B") for label in labels)


def test_zero_byte_rows_are_left_out_and_bad_input_is_named():
    df = records()
    zero = df.iloc[[0]].assign(size_bytes=0)
    check_panels(latency_bandwidth(pd.concat([zero, df])))
    with pytest.raises(ValueError, match="t_us_min"):
        latency_bandwidth(df, time="t_us_min")
    with pytest.raises(ValueError, match="nothing to plot"):
        latency_bandwidth(zero)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (8, "8 B"),
        (1000, "1000 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (4 * 2**20, "4 MiB"),
        (2**30, "1 GiB"),
        (512 * 2**20, "512 MiB"),
        (1024.0000001, "1 KiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text
