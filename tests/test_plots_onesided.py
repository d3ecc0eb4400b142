"""The one-sided lecture's figure draws the ratios it is given and says whose they are.

Inputs are small made-up tables and the SHM paper's own Table 1 ratios: the figure's
structure is under test, not any machine's numbers.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from mpilab.plots import onesided as plots_onesided  # noqa: E402

PAPER = pd.DataFrame({"SHM": [43.31 / 38.08, 2.77 / 5.64], "SHM-NC": [43.31 / 37.95,
                                                                      2.77 / 2.88]},
                     index=pd.Index([1, 36], name="ranks"))


def texts(fig):
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.texts]
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return " | ".join(out)


def test_versus_sr_draws_here_and_paper_with_the_noise_band_and_oversubscription():
    here = pd.DataFrame({"SHM": [1.0, 0.8, 1.25], "SHM-NC": [1.1, 0.9, 1.0],
                         "spread": [0.1, 0.2, 0.4]}, index=pd.Index([4, 1, 2], name="ranks"))
    fig = plots_onesided.versus_sr(here, cores=2, paper=PAPER, title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    t = texts(fig)
    for label in ("S/R / SHM (this machine, measured)", "S/R / SHM-NC (this machine, measured)",
                  "S/R / SHM (paper, its figures)", "S/R / SHM-NC (paper, its figures)",
                  "noise band", "oversubscribed here\n(> 2 cores)"):
        assert label in t, label
    lines = {ln.get_label(): ln for ln in ax.lines}
    shm = lines["S/R / SHM (this machine, measured)"]
    assert np.allclose(shm.get_xdata(), [1, 2, 4])  # sorted by ranks, values follow
    assert np.allclose(shm.get_ydata(), [0.8, 1.25, 1.0])
    paper = lines["S/R / SHM (paper, its figures)"]
    assert np.allclose(paper.get_ydata(), [43.31 / 38.08, 2.77 / 5.64])
    assert paper.get_color() == shm.get_color()  # one colour per version
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(band.min(), 1 / 1.4) and np.isclose(band.max(), 1.4)
    assert ax.get_xlim()[1] > 36  # the paper's largest count is on the axis
    assert len(ax.patches) == 1  # the oversubscribed region


def test_versus_sr_without_paper_or_oversubscription():
    here = pd.DataFrame({"SHM": [1.0, 1.05]}, index=[1, 2])
    fig = plots_onesided.versus_sr(here, cores=4)
    t = texts(fig)
    assert "oversubscribed" not in t and "paper" not in t and "noise band" not in t
    assert len(fig.axes[0].patches) == 0


@pytest.mark.parametrize("bad, cores", [
    (pd.DataFrame({"spread": [0.1]}, index=[1]), 2),  # nothing to draw
    (pd.DataFrame({"SHM": [1.0]}, index=[0]), 2),  # not a rank count
    (pd.DataFrame({"SHM": [1.0]}, index=["one"]), 2),
    (pd.DataFrame({"SHM": [1.0]}, index=[1]), 0),  # no cores
    (pd.DataFrame({"SHM": [1.0]}, index=[1]), True),
])
def test_versus_sr_rejects_what_it_cannot_draw(bad, cores):
    with pytest.raises(ValueError):
        plots_onesided.versus_sr(bad, cores=cores)
