"""Lecture 06 at the paper's scale: the allgather paper's table simulated with SimGrid SMPI.

The lecture is executed once per session by ``lecture_runs.executed`` (``MPILAB_QUICK=1``:
the full 62- and 128-process tables come from ``reference/simulated/``, and a small live
simulation runs where SimGrid is installed). Checked here, as text: every simulated table
carries the simulation's label and sits beside the paper's columns; the library's choice
per size is printed and is what Open MPI 4.1's documented rule decides; the k-of-8 counts
are printed for the simulation and the paper (and the simulated one is recounted here from
the saved records); the figure was drawn; the live run ran, or the lecture said why not.
The no-SimGrid path is run too: the section's cells, with ``smpicc``/``smpirun`` hidden
from :mod:`mpilab.sim`, must show the reference data and never start a simulation.
"""

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from lecture_runs import cell_with, executed, text_of

from mpilab import notebooks, sim, tuning

ROOT = Path(__file__).resolve().parents[1]
LECTURE = ROOT / "lectures" / "06-allgather.md"
LABEL = sim.label("allgather-paper")
REFERENCE = f"reference data: {LABEL}"
SIZES = [32 * 4**k for k in range(8)]
PAPER_SIZES = ["32 B", "128 B", "512 B", "2 KB", "8 KB", "32 KB", "128 KB", "512 KB"]
SECTION = "## At the paper's scale"


def pngs(cell):
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def reference(p):
    return json.loads((ROOT / "reference" / "simulated" / f"allgather-paper-{p}.json").read_text())


def choices(text, p):
    """{size label: choice} from the lecture's 'P processes, the library's choice' line."""
    m = re.search(rf"^{p} processes, the library's choice per size \((.+?)\): (.+)$", text, re.M)
    assert m, text
    assert LABEL in m.group(1)
    return m.group(1), dict((s, c) for s, c in re.findall(r"(\d+ K?B) ([\w/]+)", m.group(2)))


@pytest.mark.slow
def test_tables_carry_the_simulation_label_and_the_papers_columns():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def side_by_side("))
    for p in (62, 128):
        assert (f"allgather, {p} processes on 2 nodes x 32 cores, cyclic placement: "
                f"{REFERENCE}") in text, text
    assert f"simulated, not measured; the simulation leaves out {sim.LEAVES_OUT}" in text
    for s in PAPER_SIZES:
        assert s in text, s
    rows = [line for line in text.splitlines() if line.split()[:1] and line.split()[0] in
            ("linear", "bruck", "recursive_doubling", "ring", "neighbor_exchange")]
    assert len(rows) == 9, text  # recursive doubling only at 128, in both sources
    for row in ("simulated", "paper", "library ran", "Open MPI 4.1 rule", "fastest"):
        assert row in text, row
    # the paper's figures, converted from units of 10 µs: Bruck 29 -> 290 (62 processes,
    # 32 B, its best), recursive doubling 25609 -> 256,090 (128 processes, 512 KB, best)
    assert "290 *" in text and "256,090 *" in text
    ident = text_of(cell_with(nb, "def identification("))
    assert f"{REFERENCE} (SimGrid" in ident and ": 62 ranks, simulated µs" in ident
    assert len(re.findall(r"\d =", ident)) >= 8  # each size: a forced run matches the library


@pytest.mark.slow
def test_library_choice_per_size_follows_open_mpi_41s_rule():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def sim_k("))
    kept = 0
    for p in (62, 128):
        caption, got = choices(text, p)
        assert caption.startswith(REFERENCE)
        assert list(got) == PAPER_SIZES, got
        for label, n in zip(PAPER_SIZES, SIZES, strict=True):
            rule = tuning.library_default("allgather", p, n)
            # SMPI keeps the rule's recursive doubling where Open MPI falls back to Bruck
            assert rule["decision"] in got[label].split("/"), (p, label, got[label], rule)
            kept += rule["runs"] != rule["decision"] and got[label] == rule["decision"]
    assert kept == 3  # 62 processes, 32-512 B: SMPI's recursive doubling on 62 ranks


@pytest.mark.slow
def test_k_of_8_counts_for_the_simulation_and_the_paper():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def sim_k("))
    for p, paper_k in ((62, 3), (128, 1)):
        m = re.search(rf"^{p} processes: the library's choice was the best in (\d) of 8 sizes "
                      rf"in the simulation \({re.escape(LABEL)}\); in the paper: (\d) of 8$",
                      text, re.M)
        assert m, text
        assert int(m.group(2)) == paper_k
        # recounted from the saved records: the library's time equals the best C algorithm's
        recs = reference(p)["records"]
        expected = 0
        for n in SIZES:
            row = {r["impl"]: r["t_us_median"] for r in recs if r["size_bytes"] == n}
            best = min(v for k, v in row.items() if k.startswith("mpilab:"))
            expected += row["library:ompi"] <= best * (1 + 1e-9)
        assert int(m.group(1)) == expected, (p, m.group(1), expected)
    saw = text_of(cell_with(nb, "paper: 3 of 8 at 62 processes"))
    for p, paper_k in ((62, 3), (128, 1)):
        assert re.search(rf"^{p} processes, {re.escape(REFERENCE)}.*: the library's choice was "
                         rf"the best in \d of 8 sizes \(paper: {paper_k} of 8\)", saw, re.M), saw


@pytest.mark.slow
def test_the_figure_is_drawn_and_labelled():
    nb = executed("06-allgather")
    cell = cell_with(nb, "FIG_TITLE = ")
    assert pngs(cell) == 1
    assert "sim_table(128)" in cell.source and "fig.suptitle(FIG_TITLE)" in cell.source
    text = text_of(cell)
    assert f"Figure: Allgather, 128 processes, 2 nodes x 32 cores, cyclic placement: {LABEL}" \
        in text
    assert f"Left: simulated, leaving out {sim.LEAVES_OUT}" in text


@pytest.mark.slow
def test_the_tuner_runs_on_the_simulated_records():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "tuning.decision_table(sim_records"))
    assert f"the tuner's decision table from the {LABEL} records (reference data)" in text
    assert re.search(r"the tuner's choice \(or one it ties with\) is the paper's fastest "
                     r"algorithm in \d+ of 16 \(processes, size\) cases", text), text
    rules = text_of(cell_with(nb, "tuning.write_ompi_rules(sim_decision"))
    assert f"# from {LABEL}: a simulation, not a measurement" in rules
    assert "62  # communicator size" in rules and "128  # communicator size" in rules


@pytest.mark.slow
def test_the_live_simulation_ran_or_the_lecture_says_why_not():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "def simulate_here("))
    ok, why = sim.available()
    if not ok:
        assert f"SimGrid is not installed here ({why}), so the tables below are reference " \
               f"data: {LABEL}" in text
        return
    for alg in ("linear", "bruck", "ring", "neighbor_exchange", "library:ompi",
                "library:rdb"):
        assert f"{LABEL}: allgather {alg} on 62 ranks, 3 sizes" in text, alg
    assert f"{LABEL}, run here in " in text
    m = re.search(r"live run against the reference data: (\d+) times compared, largest "
                  r"difference (\S+) ", text)
    assert m and int(m.group(1)) >= 3 * 9, text  # 9 rows per size at 62 ranks
    assert float(m.group(2)) < 1e-6  # deterministic: the saved tables are this runner's


def section_sources():
    """The code the no-SimGrid run needs: the paper's figures, then the section's cells."""
    nb = notebooks.read(LECTURE)
    paper = [c.source for c in nb.cells if c.cell_type == "code" and "PAPER = {" in c.source]
    out, inside = [], False
    for c in nb.cells:
        heads = re.findall(r"^## .*$", c.source, re.M) if c.cell_type == "markdown" else []
        if heads:  # the last top-level heading of a markdown cell says where we are
            inside = heads[-1].startswith(SECTION)
        elif inside and c.cell_type == "code":
            out.append(c.source)
    assert len(paper) == 1 and len(out) >= 6, (len(paper), len(out))
    return paper + out


PREAMBLE = """
import shutil, tempfile, time
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from mpilab import collectives, plots, sim, tuning
from mpilab.plots import collectives as pc
QUICK = True
SIZES = [32 * 4**k for k in range(8)]
ALGS = list(collectives.ALGORITHMS["allgather"])
TIMEOUT = 300
"""


def test_without_simgrid_the_section_shows_reference_data(monkeypatch):
    why = "no smpicc and smpirun (SimGrid SMPI) found: hidden by this test"
    monkeypatch.setattr(sim.smpi, "_tools", lambda: ({}, why))  # where available() reads it

    def no_simulation(*args, **kwargs):
        raise AssertionError("the section simulated without SimGrid")

    monkeypatch.setattr(sim, "allgather", no_simulation)
    monkeypatch.setattr(sim, "collective", no_simulation)
    assert sim.available() == (False, why)
    out = io.StringIO()
    ns: dict = {}
    with contextlib.redirect_stdout(out):
        exec(PREAMBLE, ns)
        for src in section_sources():
            exec(compile(src, str(LECTURE), "exec"), ns)
    ns["plt"].close("all")
    text = out.getvalue()
    assert f"SimGrid is not installed here ({why}), so the tables below are reference data: " \
           f"{LABEL}, saved in reference/simulated/" in text
    assert "a live simulation" not in text and "run here in" not in text
    for p in (62, 128):
        assert f"{p} processes: {REFERENCE}" in text
        assert f"cyclic placement: {REFERENCE}" in text
        assert re.search(rf"^{p} processes: the library's choice was the best in \d of 8 sizes",
                         text, re.M)
    assert "Figure: Allgather, 128 processes" in text
    assert "62  # communicator size" in text


def test_the_simulation_is_checked_against_this_machine_before_the_scale_out():
    nb = executed("06-allgather")
    text = text_of(cell_with(nb, "sim.check_collective("))
    if not sim.available()[0]:
        assert "cannot run" in text
        return
    assert "measured (real MPI) vs simulated (SMPI, platform this-machine)" in text
    from mpilab import runtime

    cores = runtime.usable_cores()
    rows = re.findall(r"^\d+\s+(ring|bruck)\s+(\d)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([+-]\d+%)\s+"
                      r"(True|False)$", text, re.M)
    assert len(rows) == 12, text  # 2 algorithms x 3 rank counts x 2 sizes
    assert {int(r[1]) for r in rows} == {2, 3, 4}
    assert all((r[4] == "True") == (int(r[1]) > cores) for r in rows), rows
