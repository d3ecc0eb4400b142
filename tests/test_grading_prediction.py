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
    from mpilab.grading.measured import HELD_OUT
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
    assert "cases" not in inspect.signature(labs.check_predict_held_out).parameters
    assert inspect.signature(labs.check_predict_held_out).parameters["ranks"].default == 2


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
