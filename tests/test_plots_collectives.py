"""plots_collectives: who-heard-from-whom along a traced schedule, and the figures' labels.

The events are written by hand (a binomial broadcast, a ring allgather, a deadlock), so
the expected knowledge after each step is known exactly; the figures' structure and
legends are under test, not any machine's numbers.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from mpilab.plots.collectives import (  # noqa: E402
    animate,
    knowledge,
    mark_best_worst,
    predicted_vs_measured,
    step_panels,
)

# binomial broadcast from 0 on 4 ranks: step 1 0->1; step 2 0->2, 1->3
BCAST4 = [
    [("send", 1, 8), ("send", 2, 8)],
    [("recv", 0, 8), ("send", 3, 8)],
    [("recv", 0, 8)],
    [("recv", 1, 8)],
]


def ring_allgather(p, n=8):
    """Each rank sends right and receives from the left, p - 1 times (Sendrecv order)."""
    return [[ev for _ in range(p - 1) for ev in (("send", (r + 1) % p, n),
                                                   ("recv", (r - 1) % p, n))]
            for r in range(p)]


def test_knowledge_of_a_binomial_broadcast():
    sched, known = knowledge(BCAST4)
    assert [(m["step"], m["src"], m["dst"]) for m in sched] == [(1, 0, 1), (2, 0, 2), (2, 1, 3)]
    assert len(known) == 3
    assert [0 in k for k in known[0]] == [True, False, False, False]
    assert [0 in k for k in known[1]] == [True, True, False, False]
    assert [0 in k for k in known[2]] == [True, True, True, True]
    assert known[2][3] == frozenset({0, 1, 3})  # rank 3 heard from 1, which had heard from 0


def test_knowledge_of_a_ring_allgather_grows_by_one_block_per_step():
    p = 5
    sched, known = knowledge(ring_allgather(p))
    assert max(m["step"] for m in sched) == p - 1
    for k in range(p):
        assert all(len(known[k][r]) == k + 1 for r in range(p)), k
        assert known[k][2] == frozenset((2 - j) % p for j in range(k + 1))


def test_knowledge_rejects_a_deadlock_like_the_tracer():
    stuck = [[("recv", 1, 8), ("send", 1, 8)], [("recv", 0, 8), ("send", 0, 8)]]
    with pytest.raises(ValueError, match="deadlock"):
        knowledge(stuck)


def test_step_panels_draws_one_panel_per_step_plus_the_start():
    fig = step_panels(ring_allgather(4), title="ring")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 4  # start + 3 steps
    assert "3 steps, 12 messages" in fig._suptitle.get_text()
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "4/4 heard from all" in texts and "0/4 heard from all" in texts
    fig = step_panels(BCAST4, root=0, max_panels=1)
    assert len(fig.axes) == 2 and "first 1 shown" in fig._suptitle.get_text()
    assert "1/4 have the root's data" in [t.get_text() for t in fig.axes[0].texts]


def frames():
    meas = pd.DataFrame({"ranks": [2, 3, 4] * 2, "alg": ["a"] * 3 + ["b"] * 3,
                         "t_us_median": [1.0, 2, 3, 2, 3, 4]})
    meas["t_us_q1"], meas["t_us_q3"] = meas.t_us_median * 0.9, meas.t_us_median * 1.1
    pred = pd.DataFrame({"ranks": [2, 3, 4] * 2, "alg": ["a"] * 3 + ["b"] * 3,
                         "t_us": np.arange(1.0, 7.0)})
    return meas, pred


def test_predicted_vs_measured_labels_every_model_line_as_a_prediction():
    meas, pred = frames()
    fig = predicted_vs_measured(meas, pred, x="ranks", title="t", note="n")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sorted(labels) == ["a (measured)", "a (prediction)", "b (measured)",
                              "b (prediction)"]
    dashed = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "--"]
    assert [ln.get_label() for ln in dashed] == ["a (prediction)", "b (prediction)"]


def test_predicted_vs_measured_names_a_missing_column():
    meas, pred = frames()
    with pytest.raises(ValueError, match="predicted has no column"):
        predicted_vs_measured(meas, pred.drop(columns="t_us"), x="ranks")


def test_mark_best_worst_skips_rows_and_dashes_missing_values():
    t = pd.DataFrame({"8 B": [1.0, 5.0, 3.0, np.nan], "1 KiB": [0.5, 200.0, np.nan, 100.0]},
                     index=["choice", "x", "y", "z"])
    out = mark_best_worst(t, skip=["choice"])
    assert out["8 B"].tolist() == ["1", "5 !", "3 *", "—"]
    assert out["1 KiB"].tolist() == ["0.5", "200 !", "—", "100 *"]


def test_animate_has_one_frame_per_step_plus_the_start_and_renders_without_an_encoder():
    anim = animate(ring_allgather(4), title="ring")
    html = anim.to_jshtml()
    assert "<script" in html
    assert html.count("data:image/png;base64") == 4  # start + 3 steps
