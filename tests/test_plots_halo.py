"""The halo lecture's figures draw what they are given and say what it is.

Inputs are small known arrays (a serial wavefield, a synthetic timeline, a made-up
speedup table): the figures' structure is under test, not any machine's numbers.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from mpilab import halo  # noqa: E402
from mpilab.plots import halo as plots_halo  # noqa: E402


def texts(fig):
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(loc=w) for w in ("left", "center", "right")]
        out += [ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.texts]
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    for leg in fig.legends:
        out += [t.get_text() for t in leg.get_texts()]
    return " | ".join(out)


def test_decomposition_outlines_every_block_and_names_the_ghost_sources():
    fig = plots_halo.decomposition(13, 10, [(2, 2), (2, 3)], rank=[0, 4])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    t = texts(fig)
    assert "rank 0's ghosts come from: E ← 1, S ← 2" in t
    assert "rank 4's ghosts come from: W ← 3, E ← 5, N ← 1" in t
    for r in range(6):
        assert f"rank {r}\n" in t
    # one thick outline per block, at the block's place
    outlines = [p for p in fig.axes[1].patches
                if isinstance(p, Rectangle) and p.get_linewidth() > 2]
    got = sorted((round(p.get_y()), p.get_height(), round(p.get_x()), p.get_width())
                 for p in outlines)
    assert got == sorted(halo.blocks(13, 10, (2, 3)))
    with pytest.raises(ValueError):
        plots_halo.decomposition(13, 10, [(2, 2)], rank=4)


def test_timeline_draws_one_bar_per_phase_and_reports_waiting():
    tl = np.zeros((2, 2, 5, 2))  # ranks, steps, phases, (start, end)
    for r in range(2):
        for k in range(2):
            t = k * 1e-3
            tl[r, k] = [[t, t + 1e-5], [t + 1e-5, t + 6e-4], [t + 6e-4, t + 6e-4 + r * 2e-4],
                        [t + 8e-4, t + 9e-4], [t + 1e-5, t + 1e-5]]
    df = halo.timeline_frame(tl)
    fig = plots_halo.timeline({"overlap": df})
    ax = fig.axes[0]
    # rank 0 never waits (empty phases are not drawn): 3 phases for rank 0, 4 for rank 1
    assert len(ax.collections) == 3 + 4
    # span 1.9 ms x 2 ranks = 3.8 ms; rank 1 waits 2 x 0.2 ms = 0.4 ms, about 11 %
    title = ax.get_title(loc="left")
    assert "overlap: 1.9 ms; share of the ranks' time:" in title
    assert "wait 11%" in title and "progress" not in title  # no MPI_Testall calls
    assert "wait" in texts(fig) and "interior" in texts(fig)
    # overlap-test: the Testall calls' total (0.19 ms in each step of each rank: 4 x 0.19
    # ms of the 3.8 ms, 20 %) is named in the title, not drawn
    tl[..., 4, 1] = tl[..., 4, 0] + 1.9e-4
    fig = plots_halo.timeline({"overlap-test": halo.timeline_frame(tl)})
    assert len(fig.axes[0].collections) == 3 + 4
    assert "progress 20%" in fig.axes[0].get_title(loc="left")
    with pytest.raises(ValueError):
        plots_halo.timeline({})


def test_wavefield_marks_the_source_and_the_difference():
    p = halo.serial_wave(40, 30, 50, source=(10, 12))
    fig = plots_halo.wavefield(p, source=(10, 12), dims=(2, 2), difference=p * 0.0)
    assert len([a for a in fig.axes if a.images]) == 2
    t = texts(fig)
    assert "source (Ricker wavelet)" in t and "max |difference| 0 (identical)" in t
    assert "every cell equal" in t
    assert "rank 3" in t
    star = fig.axes[0].lines[0]
    assert list(star.get_xdata()) == [10] and list(star.get_ydata()) == [12]
    with pytest.raises(ValueError):
        plots_halo.wavefield(p, difference=p[:5])


def test_speedup_shades_oversubscription_and_labels_the_paper():
    df = pd.DataFrame({"ranks": [1, 2, 4], "speedup": [1.0, 1.8, 1.7]})
    paper = pd.DataFrame({"ranks": [1, 4, 9], "speedup": [1.0, 3.97, 8.26]})
    fig = plots_halo.speedup(df, cores=2, paper=paper)
    t = texts(fig)
    assert "oversubscribed" in t and "ceiling here: 2 cores" in t
    assert "paper (its figures)" in t and "this machine (measured)" in t
    eff = fig.axes[1].lines[0].get_ydata()
    assert np.allclose(eff, [1.0, 0.9, 0.425])
    with pytest.raises(ValueError):
        plots_halo.speedup(pd.DataFrame({"ranks": [1]}), cores=2)


def test_k1_draws_every_ratio_the_noise_band_and_the_paper():
    here = pd.DataFrame({"K1": [0.9, 1.1, 1.02], "blocking / overlap": [1.0, 1.2, 1.05],
                         "spread": [0.3, 0.2, 0.05]}, index=pd.Index([16, 256, 1024],
                                                                    name="sub"))
    paper = pd.Series([0.85, 1.01, 1.02], index=[16, 256, 1024], name="K1")
    fig = plots_halo.k1(here, paper=paper)
    ax = fig.axes[0]
    t = texts(fig)
    assert "K1 (this machine)" in t and "blocking / overlap (this machine)" in t
    assert "K1 (paper, its figures)" in t and "noise band" in t
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(band.min(), 1 / 1.3) and np.isclose(band.max(), 1.3)
    assert len(ax.collections) == 1  # the band
    assert np.allclose(ax.lines[1].get_ydata(), [0.9, 1.1, 1.02])
    with pytest.raises(ValueError):
        plots_halo.k1(here[["spread"]])
    # issue 28 §1b: the axis says which mode "above 1" favours, and the legend sits below
    # the axes, not over the band
    assert "above 1: the ratio's second mode (its denominator) is faster" in ax.get_ylabel()
    assert ax.get_legend() is None and len(fig.legends) == 1
    slash = plots_halo.k1(here[["blocking / overlap", "spread"]])
    assert "above 1: the mode after the slash is faster" in slash.axes[0].get_ylabel()
