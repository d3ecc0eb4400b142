"""Lectures 05 (trees and butterflies) and 06 (allgather): their key outputs, as text.

Each lecture is executed once per session by ``lecture_runs.executed`` (``MPILAB_QUICK=1``,
real MPI engines and real ``mpiexec`` jobs); ``test_lectures.test_lecture_runs_cleanly``
already checks that every cell ran and nothing was left behind. Here: the step counts the
lectures print from traces are the right ones (the expected values are written out
below, not taken from the code under test), the tables carry the papers' columns beside
this machine's, the figures were drawn, predictions are labelled, and lecture 06 says how
often the library's choice was the best.
"""

import json
import math
import re

import pytest
from lecture_runs import cell_with, executed, text_of

from mpilab import paths, runtime

pytestmark = pytest.mark.slow

PS = range(2, 9)  # the lectures trace on p = 2..8
QUICK_PS = [2, 3, 4]  # the lectures time on these under MPILAB_QUICK=1


def clog2(p):
    return math.ceil(math.log2(p))


def flog2(p):
    return int(math.log2(p))


# steps (Lamport depth) of each algorithm on p = 2..8, worked out by hand
STEPS_05 = {
    "bcast/linear": [p - 1 for p in PS],
    "bcast/binary_tree": [1, 2, 2, 3, 3, 4, 4],  # children sent in turn: 0->1, 0->2, 2->6, ...
    "bcast/binomial": [clog2(p) for p in PS],
    "reduce/gather_reduce": [1] * 7,
    "reduce/binomial": [flog2(p) for p in PS],
    "reduce/recursive_halving": [2, 3, 4, 5, 5, 5, 6],  # 2 log2 q, +1 to fold p != q
    "allreduce/recursive_doubling": [1, 3, 2, 4, 4, 4, 3],  # log2 q, +2 to fold p != q
    "allreduce/ring": [2 * (p - 1) for p in PS],
    "barrier/linear": list(PS),
    "barrier/tree": [2, 3, 4, 5, 5, 6, 7],
    "barrier/dissemination": [clog2(p) for p in PS],
    "scatter/linear": [p - 1 for p in PS],
    "scatter/binomial": [clog2(p) for p in PS],
    "gather/linear": [1] * 7,
    "gather/binomial": [flog2(p) for p in PS],
}
STEPS_06 = {
    "allgather/linear": list(PS),
    "allgather/bruck": [clog2(p) for p in PS],
    "allgather/recursive_doubling": [1, None, 2, None, None, None, 3],
    "allgather/ring": [p - 1 for p in PS],
    "allgather/neighbor_exchange": [1, None, 2, None, 3, None, 4],
    "allgather/two_proc": [1] + [None] * 6,
}


def traced_steps(text):
    """{'op/alg': [steps or None per p]} from the lecture's 'op/alg: traced 1 2 -' lines."""
    out = {}
    for name, values in re.findall(r"^(\w+/\w+): traced ([\d -]+);", text, re.M):
        out[name] = [None if v == "-" else int(v) for v in values.split()]
    return out


def pngs(cell):
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


# --- lecture 05 ---------------------------------------------------------------------------


def test_lecture_05_traced_step_counts_are_the_expected_ones():
    nb = executed("05-collectives-trees")
    text = text_of(cell_with(nb, "traced_steps = "))
    assert traced_steps(text) == STEPS_05, text
    assert "every traced step count equals its formula" in text


def test_lecture_05_draws_schedules_from_traces():
    nb = executed("05-collectives-trees")
    assert pngs(cell_with(nb, "pc.step_panels(")) == 3  # linear, binary tree, binomial
    assert pngs(cell_with(nb, "tracing.draw(")) == 1


def test_lecture_05_measures_every_operation_at_every_p_with_progress():
    nb = executed("05-collectives-trees")
    text = text_of(cell_with(nb, "def time_op("))
    for p in QUICK_PS:
        for op in ("bcast", "reduce", "allreduce", "barrier", "scatter", "gather"):
            assert re.search(rf"^p={p} {op}: .*library \S+", text, re.M), (p, op, text)
    assert "ran oversubscribed" in text


def test_lecture_05_times_rooted_collectives_one_call_at_a_time():
    """Back-to-back calls of a rooted collective can overlap; the lecture shows both ways
    side by side and draws its verdicts from the separated timing."""
    nb = executed("05-collectives-trees")
    ways = text_of(cell_with(nb, "def both_ways("))
    for op in ("reduce", "gather", "bcast", "allreduce"):
        assert op in ways, ways
    assert "back-to-back / separated" in ways and "fastest repetition, µs per call" in ways
    skew = re.findall(r"p=(\d+): the barrier's exit skew over 30 barriers, median ([\d.]+) µs, "
                      r"largest ([\d.]+) µs \(clock offsets known to ±([\d.]+) µs\)", ways)
    assert len(skew) == 2 and skew[0][0] == "2", ways  # on 2 and on the largest p
    assert all(float(med) <= float(big) for _, med, big, _ in skew), skew
    assert "separated=True" in cell_with(nb, "def time_op(").source


def test_lecture_05_names_the_library_s_own_reduce_rule():
    nb = executed("05-collectives-trees")
    text = text_of(cell_with(nb, 'tuning.library_default("reduce"'))
    assert "Open MPI 4.1's reduce rule (MPI_SUM)" in text
    # read from the source: linear up to 3 ranks at both sizes, a binary tree at 4 and 100 B
    assert re.search(r"^\s*2\s+linear\s+linear\s*$", text, re.M), text
    assert re.search(r"^\s*4\s+binary\s+chain\s*$", text, re.M), text


def test_lecture_05_tables_put_the_paper_beside_this_machine():
    nb = executed("05-collectives-trees")
    text = text_of(cell_with(nb, "COMPARE = {"))
    for name, finding in (("scatter–gather", "slightly better for DECK at 100 B"),
                          ("reduce", "better for DECK"),
                          ("barrier", "equal up to 6 processes")):
        assert f"{name}  —  paper: {finding}" in text, name
    for column in ("this machine, 100 B", "this machine, 10 KB", "this machine, no data",
                   "DECK-style", "textbook", "library", "DECK/textbook", "oversubscribed"):
        assert column in text, column
    assert "Open MPI" in text or "MPICH" in text  # which library measured it
    verdict = text_of(cell_with(nb, "def verdict("))
    assert verdict.count("Here: DECK-style faster at p = ") == 7
    assert verdict.count("fastest repetitions: DECK-style faster at p = ") == 7
    assert re.search(r"medians and fastest repetitions agree on \d of 7 comparisons", verdict)


def test_lecture_05_prediction_is_labelled_and_drawn_beside_the_measurement():
    nb = executed("05-collectives-trees")
    assert "Hockney fit: α =" in text_of(cell_with(nb, "models.fit_hockney("))
    cell = cell_with(nb, "pc.predicted_vs_measured(")
    text = text_of(cell)
    # matplotlib may log "findfont: ..." lines first (a font cache being rebuilt)
    assert re.search(r"^prediction: .*binomial bcast on 4 ranks", text, re.M), text
    assert "measured:" in text
    assert pngs(cell) == 1


# --- lecture 06 ---------------------------------------------------------------------------


def test_lecture_06_traced_step_counts_are_the_expected_ones():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "traced_steps, mismatch = "))
    assert traced_steps(text) == STEPS_06, text
    assert "every traced step count equals its formula" in text


def test_lecture_06_draws_schedules_and_counts_bytes_per_step():
    nb = executed("06-allgather")
    assert pngs(cell_with(nb, "pc.step_panels(")) == 4
    assert pngs(cell_with(nb, "tracing.draw(")) == 1
    table = text_of(cell_with(nb, "def per_step("))
    rows = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "8×1, 8×2, 8×4" in rows["bruck"] and "8×1, 8×2, 8×4" in rows["recursive_doubling"]
    assert "8×1, " * 6 + "8×1" in rows["ring"]
    assert "8×1, 8×2, 8×2, 8×2" in rows["neighbor_exchange"]


def test_lecture_06_predictions_are_labelled():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def predicted_table("))
    for p in (4, 62, 128):
        assert re.search(rf"^prediction \(Hockney, Hockney fit: α = [^)]+\), p = {p}: µs per "
                         "call", text, re.M), p


def test_lecture_06_table_has_the_paper_columns_and_this_machine():
    nb = executed("06-allgather")
    sizes = ["32 B", "128 B", "512 B", "2 KiB", "8 KiB", "32 KiB", "128 KiB", "512 KiB"]
    here = text_of(cell_with(nb, "def machine_table("))
    assert "this machine: allgather, 4 ranks on" in here
    for s in sizes:
        assert s in here, s
    for row in ("library's choice", "linear", "bruck", "recursive_doubling", "ring",
                "neighbor_exchange", "the library's rule runs"):
        assert row in here, row
    assert here.count(" *") >= 8  # a best in every column
    paper = text_of(cell_with(nb, "PAPER = {"))
    assert "paper, 62 processes, x 10 µs" in paper
    assert "29 ± 149 *" in paper and "Open MPI's rule chose" in paper
    for s in ["32 B", "128 B", "512 B", "2 KB", "8 KB", "32 KB", "128 KB", "512 KB"]:
        assert s in paper, s


def test_lecture_06_counts_how_often_the_library_chose_the_best():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def k_of_n("))
    assert "paper, 62 processes: the library's choice was the best in 3 of 8 sizes" in text
    assert "paper, 128 processes: the library's choice was the best in 1 of 8 sizes" in text
    assert re.search(r"this machine, 4 ranks: the library's choice was the best in [0-8] of 8 "
                     r"sizes", text), text
    summary = text_of(cell_with(nb, "paper: 3 of 8 at 62 processes"))
    assert re.search(r"4 ranks here: the library's choice was the best in [0-8] of 8 sizes",
                     summary)


def test_lecture_06_tunes_and_applies_the_rules():
    nb = executed("06-allgather")
    progress = text_of(cell_with(nb, "tuning.tune("))
    assert "p=4: tuning 8 sizes, 5 algorithms" in progress
    assert f"oversubscribed: {4 > runtime.usable_cores()}" in progress
    table = text_of(cell_with(nb, "decision = pd.DataFrame("))
    assert re.search(r"it switches away from the library's rule at \d+ of 8 points", table)
    assert "switch (U test, Holm)" in table and "p (Holm)" in table
    assert re.search(r"test: Mann-Whitney U, one-sided .* Holm's step-down correction .*"
                     r"comparisons in the correction: \d+ at p=4; \d+ repetitions", table)
    rules = text_of(cell_with(nb, '["rules_file"]).read_text()'))
    assert "# allgather" in rules and "4  # communicator size" in rules
    assert "OMPI_MCA_coll_tuned_dynamic_rules_filename" in rules
    applied = text_of(cell_with(nb, "def one_job("))
    assert re.search(r"p=4: tuned faster than the default by more than 10 % at \d of 8", applied)
    assert pngs(cell_with(nb, "pc.predicted_vs_measured(")) == 1


def test_lecture_05_animates_a_schedule_and_lists_every_algorithm():
    nb = executed("05-collectives-trees")
    html = text_of(cell_with(nb, "pc.animate("))
    assert "<script" in html and "data:image/png;base64" in html
    table = text_of(cell_with(nb, "allalg = "))
    assert "* = oversubscribed" in table
    star = "*" if 4 > runtime.usable_cores() else ""
    for name in ("binary_tree", "recursive_halving", "dissemination", "library", "p=2 100 B",
                 f"p=4{star} 10 KB"):
        assert name in table, name


def test_lecture_06_shows_the_16_core_reference_run_labelled_with_its_ratios():
    """The 16-core allgather run is labelled as reference data from that machine, its
    ratios are the ones in reference/16core-xeon-openmpi5/allgather16.json, and linear
    (Open MPI's gather + broadcast against our linear) is marked and kept out of the range."""
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "allgather16.json"))
    assert ("REFERENCE DATA from reference/16core-xeon-openmpi5 (16 cores of an Intel(R) "
            "Xeon(R) Processor, Open MPI 5.0.11, measured 2026-11-26), NOT this machine: "
            "allgather, 16 ranks on 16 cores (not oversubscribed)") in text, text
    doc = json.loads((paths.reference_dir() / "16core-xeon-openmpi5" / "allgather16.json")
                     .read_text())
    med = {(r["impl"], r["size_bytes"]): r["t_us_median"] for r in doc["records"]}
    sizes = sorted({n for _, n in med})
    assert len(sizes) == 8

    def ratios(alg):
        return [med[(f"mpilab:{alg}", n)] / med[(f"library:{alg}", n)] for n in sizes]

    rows = {}  # label -> the printed values after it
    for line in text.splitlines():
        label, sep, rest = line.partition(" / Open MPI")
        if sep and label.endswith(": C"):
            rows[label[:-3]] = rest
    like = ("bruck", "recursive_doubling", "ring", "neighbor_exchange")
    assert set(rows) == {*like, "linear"}, text
    assert rows["linear"].startswith(" (NOT like for like) ")
    for alg, rest in rows.items():
        printed = [float(v) for v in rest.replace("(NOT like for like)", "").split()]
        assert printed == [round(r, 2) for r in ratios(alg)], (alg, printed)
    # Bruck, 128 KiB blocks: the lowest like-for-like ratio (0.85 when the file was added)
    bruck_128k = med[("mpilab:bruck", 131072)] / med[("library:bruck", 131072)]
    assert rows["bruck"].split()[6] == f"{bruck_128k:.2f}"
    like_all = [r for alg in like for r in ratios(alg)]
    assert (f"course C / Open MPI {min(like_all):.2f}x (bruck, 128 KiB) to "
            f"{max(like_all):.2f}x (neighbor_exchange, 2 KiB)") in text, text
    lin = ratios("linear")
    assert (f"linear, NOT like for like (two algorithms of one name), left out of that "
            f"range: {min(lin):.2f}x to {max(lin):.2f}x (128 KiB)") in text, text
    assert "recursive_doubling at every size" in text


# steps of the alltoall and reduce-scatter algorithms on p = 2..8, worked out by hand, and
# the blocks all ranks send together: p (p - 1), for Bruck p times the set bits of 0..p-1
STEPS_06_A2A = {
    "alltoall/pairwise": [p - 1 for p in PS],
    "alltoall/bruck": [clog2(p) for p in PS],
    "reduce_scatter_block/ring": [p - 1 for p in PS],
    "reduce_scatter_block/recursive_halving": [1, None, 2, None, None, None, 3],
}
BLOCKS_06_A2A = {
    "alltoall/pairwise": [p * (p - 1) for p in PS],
    "alltoall/bruck": [2, 6, 16, 25, 42, 63, 96],  # 2x1, 3x2, 4x4, 5x5, 6x7, 7x9, 8x12
    "reduce_scatter_block/ring": [p * (p - 1) for p in PS],
    "reduce_scatter_block/recursive_halving": [2, None, 12, None, None, None, 56],
}


def test_lecture_06_traces_alltoall_and_reduce_scatter():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "a2a_mismatch = 0"))
    assert traced_steps(text) == STEPS_06_A2A, text
    blocks = {name: [None if v == "-" else int(v) for v in values.split()] for name, values
              in re.findall(r"^(\w+/\w+): .*blocks sent in all ([\d -]+?) (?:ok|MISMATCH)$",
                            text, re.M)}
    assert blocks == BLOCKS_06_A2A, text
    assert "every traced step count and block count equals its formula" in text
    assert pngs(cell_with(nb, "a2a_panels = [")) == 1
    costs = text_of(cell_with(nb, 'A2A_OPS = ("alltoall"'))
    assert "⌈log2 p⌉α + B(p) n/β" in costs and "(p-1)(α + n/β)" in costs


def test_lecture_06_measures_alltoall_and_reduce_scatter_beside_the_library():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def time_ops("))
    for p in (2, 4):
        assert f"p={p}: " in text and f"oversubscribed: {p > runtime.usable_cores()}" in text
        for op in ("alltoall", "reduce_scatter_block"):
            assert f"this machine: {op}, {p} ranks on" in text, (p, op)
    for row in ("pairwise", "bruck", "ring", "recursive_halving", "library",
                "pairwise (prediction)", "ring (prediction)"):
        assert re.search(rf"^{re.escape(row)} ", text, re.M), row
    # one verdict line per table and size: which of ours won, by how much, the noise
    verdicts = re.findall(r"^  \S+ \S+: ours fastest (\w+) \([\d.]+ µs; [\d.]+× \w+, "
                          r"(?:beyond|within) the noise\); the model picks \w+", text, re.M)
    assert len(verdicts) == 2 * 2 * 3, text  # p = 2, 4; two ops; three sizes
    if runtime.selected_library() == "openmpi":
        assert "Open MPI 4.1's rule runs" in text and "linear_sync" in text
