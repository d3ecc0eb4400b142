"""The shape of a graded prediction (mpilab.grading.prediction), on a made-up measurement.

The labs' own predictions are graded against real measurements in their autograde tests;
here a `Prediction` with a `now` that measures nothing shows what the shape does: the
made-up cases against the model, each measured part against the prediction, one call
per distinct arguments, the result's keys, and the try-it cell.
"""

from __future__ import annotations

import pytest

from mpilab.grading import CheckFailed
from mpilab.grading.prediction import Part, Prediction, guessed, shown, where

M = {"ranks": 2, "cores": 2, "oversubscribed": False, "alpha_us": 2.0, "beta_MBps": 1000.0,
     "small_us": 3.5, "big_us": 1100.0}


def reference(n, a, b):
    return a + n / b


def made_up(**kw) -> Prediction:
    parts = kw.pop("parts", lambda m: [
        Part("a small message", (1000, m["alpha_us"], m["beta_MBps"]), m["small_us"],
             "small_predicted_us", "small_ratio"),
        Part("a big message", (1 << 20, m["alpha_us"], m["beta_MBps"]), m["big_us"],
             "big_predicted_us", "big_ratio")])
    return Prediction(
        name="t_us", now=lambda ranks: dict(M, asked=ranks), parts=parts,
        tolerance=(0.5, 2.5), reference=reference,
        hint=lambda got, n, a, b: guessed(got, [(n / b, "Each message also costs α.")],
                                          "α + n / β"),
        model=lambda m: f"α = {m['alpha_us']:g} µs, measured just now on {where(m)}",
        shows=lambda f, m, ranks: print(f"on {ranks}: predicted {shown(f, 1000, 2.0, 1e3)}"),
        **kw)


def test_a_right_model_passes_and_gives_each_parts_prediction_and_ratio():
    got = made_up().check(reference, [(10, 1.0, 100.0)], ranks=3)
    assert got["asked"] == 3 and got["small_predicted_us"] == 3.0
    assert got["small_ratio"] == pytest.approx(3.5 / 3.0)
    assert got["big_ratio"] == pytest.approx(1100.0 / reference(1 << 20, 2.0, 1000.0))


def test_a_wrong_model_fails_on_the_made_up_cases_with_the_hint():
    with pytest.raises(CheckFailed, match=r"(?s)t_us\(10, 1.0, 100.0\).*costs α"):
        made_up().check(lambda n, a, b: n / b, [(10, 1.0, 100.0)], ranks=2)


def test_a_prediction_off_the_measurement_names_the_part_and_the_numbers():
    with pytest.raises(CheckFailed) as exc:
        made_up().check(lambda n, a, b: reference(n, a, b) / 1e6, [], ranks=2)
    text = str(exc.value)
    assert text.startswith("a small message: measured 3.5 µs just now")
    assert "α = 2 µs, measured just now on 2 ranks on 2 cores" in text
    assert "in seconds instead of µs" in text


def test_parts_of_the_same_arguments_call_the_function_once_and_pick():
    calls = []

    def pair(p, hop):
        calls.append((p, hop))
        return p * hop, hop

    two = made_up(expect_cases=lambda f, cases: None, parts=lambda m: [
        Part("a lap", (2, 1.0), 2.0, "lap", "lap_ratio", pick=lambda g: g[0]),
        Part("a shift", (2, 1.0), 1.5, "shift", "shift_ratio", pick=lambda g: g[1])])
    got = two.check(pair, [], ranks=2)
    assert calls == [(2, 1.0)] and (got["lap"], got["shift"]) == (2.0, 1.0)
    assert got["shift_ratio"] == 1.5


def test_the_try_it_cell_prints_and_says_what_raised(capsys, monkeypatch):
    monkeypatch.delenv("MPILAB_GRADING", raising=False)

    def broken(n, a, b):
        raise ValueError("no")

    made_up().show(broken, 4)
    assert capsys.readouterr().out == "on 4: predicted (broken raised ValueError: no)\n"


def test_a_check_without_cases_still_refuses_a_number_that_ignores_its_arguments():
    """Lab 01's held-out check has no made-up cases: its related arguments (twice the size;
    twice α and half β) refuse a prediction that ignores the size or α and β, and pass
    any α + n / β-shaped one, the latency left out included."""
    from mpilab.grading.pingpong import HELD_OUT
    from mpilab.grading.prediction import ab_related

    assert HELD_OUT.related is ab_related

    held = Prediction(
        name="t_us", now=lambda ranks: dict(M), tolerance=(0.5, 2.5), model=lambda m: "α, β",
        parts=lambda m: [Part("a big message", (1 << 20, m["alpha_us"], m["beta_MBps"]),
                              m["big_us"])], related=ab_related)
    for model in (reference, lambda n, a, b: n / b):
        held.check(model, ranks=2)
    with pytest.raises(CheckFailed, match="must grow with the size"):
        held.check(lambda n, a, b: a + (1 << 20) / b, ranks=2)
    with pytest.raises(CheckFailed, match="from the α and β it is given"):
        held.check(lambda n, a, b: 2.0 + n / 1000.0, ranks=2)  # M's α and β, hard-coded
    # a prediction that is no time at all is told so first, before any relation
    for nonsense, said in ((lambda n, a, b: 0.0, "a time must be positive"),
                           (lambda n, a, b: -5.0, "a time must be positive"),
                           (lambda n, a, b: "fast", "should be a number")):
        with pytest.raises(CheckFailed, match=said):
            held.check(nonsense, ranks=2)


def test_a_part_may_carry_its_own_band_and_hint():
    """A part's tolerance replaces the prediction's for that part alone, and its hint,
    from what the function returned, ends the message of a miss."""
    def parts(band):
        return lambda m: [
            Part("a small message", (1000, m["alpha_us"], m["beta_MBps"]), m["small_us"],
                 "small_predicted_us", "small_ratio", tolerance=band,
                 hint=lambda got: f"Hint: {got:g} µs."),
            Part("a big message", (1 << 20, m["alpha_us"], m["beta_MBps"]), m["big_us"],
                 "big_predicted_us", "big_ratio")]

    # the small message's ratio is 3.5 / 3.0 = 1.17: inside the prediction's (0.5, 2.5)
    assert made_up(parts=parts(None)).check(reference, ranks=2)["small_ratio"] > 1.1
    with pytest.raises(CheckFailed) as exc:
        made_up(parts=parts((0.9, 1.1))).check(reference, ranks=2)
    text = str(exc.value)
    assert text.startswith("a small message") and "should be 0.9 to 1.1 times" in text
    assert text.endswith("it is 1.17 times. Hint: 3 µs."), text


# -- lab 01's held-out sizes, on a made-up measurement shaped like the course's VM's ------

def _lab01(ratio_small: float = 1.15, ratio_big: float = 2.0):
    """Lab 01's prediction as graded, its measurement made up: α 0.6 µs, β 26,000 MB/s
    (the course's VM under load, 2026-11-28), 256 B and 4 MiB taking `ratio_*` times the
    right model's prediction."""
    import dataclasses

    from mpilab.grading import pingpong as PM

    a, b = 0.6, 26_000.0
    m = {"ranks": 2, "cores": 2, "oversubscribed": False, "alpha_us": a, "beta_MBps": b,
         "small_us": ratio_small * (a + PM.SMALL_BYTES / b),
         "held_out_us": ratio_big * (a + PM.HELD_OUT_BYTES / b)}
    return dataclasses.replace(PM.HELD_OUT, now=lambda ranks: dict(m))


def test_lab01_right_model_passes_both_sizes():
    got = _lab01().check(reference, ranks=2)
    assert got["small_ratio"] == pytest.approx(1.15) and got["ratio"] == pytest.approx(2.0)


@pytest.mark.parametrize("model, said", [
    (lambda n, a, b: n / b, "the latency α is missing"),  # bandwidth only
    (lambda n, a, b: 2 * a + n / b, "That counts α twice"),  # the fixed cost twice
    (lambda n, a, b: a + 8 * n / b, "must take n / β longer"),  # bits for bytes: 8 n / β
    (lambda n, a, b: a + 0 * n, "must grow with the size"),  # latency only
    (lambda n, a, b: 2 * (a + n / b), "must take n / β longer"),  # twice
])
def test_lab01_models_whose_terms_differ_fail_with_what_was_wrong(model, said):
    """α + n / β-shaped slips (no α, α twice) predict 4 MiB as well as the right model;
    256 B, where α is nearly all of the time, refuses them and says why."""
    with pytest.raises(CheckFailed, match=said):
        _lab01().check(model, ranks=2)


def test_lab01_bands_lie_between_the_right_model_and_alpha_twice():
    """The measured ratios of the bands' comment: the right model's lowest at 256 B
    passes, α counted twice's highest fails."""
    from mpilab.grading import pingpong as PM

    lo, _hi = PM.SMALL_TOLERANCE
    assert 0.60 < lo < 1.12
    _lab01(ratio_small=1.12).check(reference, ranks=2)
    with pytest.raises(CheckFailed, match="counts α twice"):  # 2α + n/β: about half
        _lab01(ratio_small=1.19).check(lambda n, a, b: 2 * a + n / b, ranks=2)


def test_the_cells_are_the_checks_under_the_labs_names(capsys, monkeypatch):
    """``cells`` gives a lab's ``check_X`` and ``show_X``: the student's function under
    its own name (a keyword too), the lab's defaults, the check's result, a module name
    that pickles, and nothing shown while grading."""
    import inspect
    import pickle

    check, show = made_up().cells(
        __name__, "check_t_us", "show_t", "t_us(n, alpha_us, beta_MBps)",
        against="a big message", shows="a big message", cases=((10, 1.0, 100.0),), ranks=3)
    assert (check.__name__, show.__name__) == ("check_t_us", "show_t")
    assert str(inspect.signature(check)).startswith("(t_us: collections.abc.Callable, cases")
    assert "ranks: int = 3" in str(inspect.signature(check))
    assert check(t_us=reference) == made_up().check(reference, [(10, 1.0, 100.0)], ranks=3)
    assert check(reference, [], ranks=5)["asked"] == 5
    with pytest.raises(CheckFailed, match="costs α"):
        check(lambda n, a, b: n / b)  # the default cases
    with pytest.raises(TypeError):
        check(reference, [], 5)  # ranks is keyword-only, as the labs' checks had it
    monkeypatch.delenv("MPILAB_GRADING", raising=False)
    show(reference)
    assert capsys.readouterr().out == "on 3: predicted      3.0 µs\n"
    monkeypatch.setenv("MPILAB_GRADING", "1")  # the student's kernel while grading
    assert show(reference) is None
    assert capsys.readouterr().out.startswith("(not run while grading")

    labs = pytest.importorskip("mpilab.grading.measured")
    assert pickle.loads(pickle.dumps(labs.check_ring_times)) is labs.check_ring_times
    assert labs.check_ring_times.__code__.co_name == "check_ring_times"  # refusals name it
    held_out = pytest.importorskip("mpilab.grading.pingpong").check_predict_held_out
    assert "cases" not in inspect.signature(held_out).parameters
    assert inspect.signature(held_out).parameters["ranks"].default == 2


def test_the_unit_slips_of_a_fixed_part_plus_bytes_at_beta_are_named():
    from mpilab.grading.prediction import unit_slips

    n, fixed, beta = 1 << 20, 6.0, 40000.0
    slips = unit_slips(fixed, n, beta, "β_copy")
    right = fixed + n / beta
    for got, said in ((fixed + 8 * n / beta, "n_bytes is already in bytes: n / β_copy."),
                      (fixed + n / beta * 1e6, "1 MB/s is one byte per µs"),
                      (fixed + n / beta / 1e6, "1 MB/s is one byte per µs")):
        assert guessed(got, slips, "other").startswith(said)
    assert guessed(right, slips, "other") == "other"


def test_a_miss_measured_while_the_cores_were_busy_is_no_verdict_in_a_students_notebook(
        monkeypatch):
    """A measurement whose ranks waited for a CPU (a classmate's sweep on the server) can
    push a right model out of its band: in the student's own notebook that miss says so,
    as Ungradable (no verdict), with the check's own words; a miss no load explains (a
    unit slip), a quiet or oversubscribed measurement, and the grader's kernel keep the
    failed check."""
    import dataclasses

    from mpilab.grading import Ungradable
    from mpilab.grading import steady as S

    def check(model, **m):
        p = dataclasses.replace(made_up(), now=lambda ranks: dict(M, **m))
        return p.check(model, [], ranks=2)

    def a_third(n, a, b):  # measured 3 times the prediction: out of (0.5, 2.5)
        return reference(n, a, b) / 3

    with pytest.raises(Ungradable) as exc:
        check(a_third, cpu_wait=0.9)
    text = str(exc.value)
    assert text.startswith("a small message: measured 3.5 µs just now") and "it is 3.5 times" in text
    assert "its ranks waited for a CPU 90% of the time" in text, text
    assert "may be the machine's, not your model's" in text
    with pytest.raises(CheckFailed, match="in seconds instead of µs"):  # 10⁶ off: the model's
        check(lambda n, a, b: reference(n, a, b) / 1e6, cpu_wait=0.9)
    for m in ({"cpu_wait": S.BUSY / 2}, {"cpu_wait": None}, {},
              {"cpu_wait": 0.9, "oversubscribed": True}):
        with pytest.raises(CheckFailed, match="should be 0.5 to 2.5 times"):
            check(a_third, **m)
    assert check(reference, cpu_wait=0.9)["big_ratio"] > 0  # a pass is a pass
    assert S.busy(dict(M, cpu_wait=0.9))
    monkeypatch.setenv("MPILAB_GRADER", "/nonexistent/grader.json")  # as the grader's kernel
    assert S.busy(dict(M, cpu_wait=0.9)) is None  # it holds the cores, and grades
