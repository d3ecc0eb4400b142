"""Lecture 05's simulated section: the DECK paper's sweep at its scale (20 nodes, SMPI).

The lecture is executed once per session by ``lecture_runs.executed`` (``MPILAB_QUICK=1``:
broadcasts and reduces simulated live at five process counts, the full sweep from
``reference/simulated/deck-paper-*.json``). Here: the tables and the figure carry the
simulation's label, the tables have the paper's rows (p = 2..20) and our algorithms as
columns, and the simulated times have the shape the algorithms imply. The expected shapes
are worked out below from the message patterns and the platform's α and β (its XML file),
not taken from the code under test. Every call is timed alone after an untimed barrier
(the lecture's protocol), so each time may also carry the barrier's exit skew, at most
about one message's latency (SKEW):

- a reduce at the root receives p - 1 whole vectors one after the other, (p - 1)(α + n/β);
  a binomial reduce takes ceil(log2 p) rounds;
- a send does not hold its sender, so a parent's k messages leave together and share its
  link: the linear root's arrive after α + (p - 1) n/β, and at 10 KB (n/β >> α) a binary
  tree takes at most floor(log2 p) levels of α + 2 n/β, the binomial tree more;
- a dissemination barrier takes ceil(log2 p) rounds; DECK's tree barrier goes up the tree
  and back down, more hops from p = 4.
"""

import json
import math
import re

import pytest
from lecture_runs import cell_with, executed, text_of

from mpilab import sim

LABEL = "simulated (SMPI, platform deck-paper)"
PS = list(range(2, 21))
LECTURE = "05-collectives-trees"
OPS = ("bcast", "reduce", "allreduce", "barrier", "scatter", "gather")
slow = pytest.mark.slow


def clog2(p):
    return math.ceil(math.log2(p))


def platform_alpha_us():
    """One message's latency across two nodes: the platform's two links (lat="30us")."""
    m = re.fullmatch(r"([\d.]+)us", sim.platform("deck-paper").params["lat"])
    return 2 * float(m.group(1))


#: The barrier's exit skew a separated time may carry (µs): at most about one latency.
SKEW = 1.5 * 60
#: A simulated message costs a little more than 2 x 30 µs + n/β (the simulated ping-pong's
#: one-way time of 1 B is 61.7 µs): a chain of k messages may take k times this more.
PER_MESSAGE = 1.03


def chain(k, msg):
    """Bounds of k messages of msg µs one after the other, plus the barrier's exit skew."""
    return k * msg, k * msg * PER_MESSAGE + SKEW


def platform_beta_MBps():
    """The platform file's link bandwidth (bw="12.5MBps")."""
    m = re.fullmatch(r"([\d.]+)MBps", sim.platform("deck-paper").params["bw"])
    return float(m.group(1))


def tables(text):
    """{op: {(size, alg): {p: µs}}} from the blocks the section prints under each title."""
    out = {}
    blocks = re.split(r"^(\S+) — " + re.escape(LABEL) + r": simulated, not measured.*$",
                      text, flags=re.M)
    for op, body in zip(blocks[1::2], blocks[2::2], strict=True):
        lines = [ln for ln in body.strip("\n").splitlines() if ln.strip()]
        size_line, alg_line = lines[0], lines[1]
        algs = alg_line.split()[1:]
        sizes = (["no data"] * len(algs) if "no data" in size_line
                 else ["100 B"] * (len(algs) // 2) + ["10 KB"] * (len(algs) // 2))
        cols = {}
        for ln in lines[2:]:
            m = re.match(r"^\s*(\d+)\s+([\d.\s]+)$", ln)
            if not m:
                continue
            p, values = int(m.group(1)), [float(v) for v in m.group(2).split()]
            assert len(values) == len(algs), ln
            for key, v in zip(zip(sizes, algs, strict=True), values, strict=True):
                cols.setdefault(key, {})[p] = v
        out[op] = cols
    return out


@pytest.fixture(scope="module")
def sim_tables():
    nb = executed(LECTURE)
    return tables(text_of(cell_with(nb, "DECK_TABLES = {op: sim_table(op)")))


# --- the reference files (no notebook) -----------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_reference_files_are_labelled_and_complete(op):
    doc = json.loads((sim.reference_dir() / f"deck-paper-{op}.json").read_text())
    meta, recs = doc["meta"], doc["records"]
    assert meta["label"] == LABEL and meta["simulated"] is True
    assert meta["settings"]["map_by"] == "node" and meta["settings"]["ranks"] == PS
    assert "deck_sweep.py" in meta["command"] and "sim.collective" in meta["script"]
    assert meta["settings"]["timing"] == "separated" and "separated=True" in meta["script"]
    assert {r["label"] for r in recs} == {LABEL} and all(r["simulated"] for r in recs)
    assert all(r["map_by"] == "node" and not r["oversubscribed"] for r in recs)
    assert {r["timing"] for r in recs} == {"separated"}
    want = {(alg, p) for alg in [*sim.OUR_ALGORITHMS[op], "mpich"] for p in PS}
    assert {(r["alg"], r["ranks"]) for r in recs} == want
    sizes = {r["size_bytes"] for r in recs}
    assert sizes == ({0} if op == "barrier" else {96 if op in ("reduce", "allreduce") else 100,
                                                    10240})


def test_reference_timing_file_has_both_ways_and_rooted_calls_overlap_back_to_back():
    """deck-paper-timing.json: each algorithm timed both ways at every p. An allreduce
    cannot overlap with the next call: separated - back-to-back is the barrier's exit skew,
    positive and at most about one latency. A binomial broadcast can: back to back it
    takes well under the time of one call alone."""
    doc = json.loads((sim.reference_dir() / "deck-paper-timing.json").read_text())
    assert doc["meta"]["label"] == LABEL and "separated=separated" in doc["meta"]["script"]
    t = {(r["op"], r["ranks"], r["size_bytes"], r["timing"]): r["t_us_median"]
         for r in doc["records"]}
    assert {(op, p) for op, p, _, _ in t} == {(op, p) for op in OPS for p in PS}
    for (op, p, n, timing), v in t.items():
        other = t[op, p, n, "separated" if timing == "back-to-back" else "back-to-back"]
        if op == "allreduce" and timing == "separated":
            assert 0 < v - other <= SKEW, (p, n)
        if op == "bcast" and timing == "back-to-back" and p >= 8:
            assert v < 0.7 * other, (p, n)


# --- the executed section ---------------------------------------------------------------


@slow
def test_section_says_what_it_ran_and_checks_live_against_reference():
    nb = executed(LECTURE)
    text = text_of(cell_with(nb, "def simulate(ps, ops)"))
    assert LABEL in text and "Fast Ethernet (assumed)" in text
    if sim.available()[0]:
        for p in (2, 4, 8, 16, 20):
            assert f"p = {p}: bcast, reduce simulated in" in text
        m = re.search(r"live vs reference data: (\d+) of (\d+) points in both, largest "
                      r"difference ([\d.]+)%", text)
        assert m, text
        # 5 process counts x (4 bcast + 4 reduce algorithms) x 2 sizes
        assert int(m.group(1)) == int(m.group(2)) == 80 and float(m.group(3)) < 0.5
    else:
        assert "this section shows reference data, " + LABEL in text
    m = re.search(r"α = ([\d.]+) µs, β = ([\d.]+) MB/s \(the platform's α, β", text)
    assert m and 55 < float(m.group(1)) < 70 and float(m.group(2)) == pytest.approx(
        platform_beta_MBps(), rel=0.05)


@slow
def test_section_shows_both_timings_as_their_own_labelled_point():
    """The tables time each call alone; the cell after them shows back-to-back / separated
    from deck-paper-timing.json, labelled, and the skew range computed from that file."""
    nb = executed(LECTURE)
    text = text_of(cell_with(nb, 'TIMING = sim.load_reference("deck-paper-timing")'))
    assert LABEL in text and "back-to-back / separated" in text and "Simulated, not measured" in text
    doc = json.loads((sim.reference_dir() / "deck-paper-timing.json").read_text())
    t = {(r["op"], r["ranks"], r["size_bytes"], r["timing"]): r["t_us_median"]
         for r in doc["records"]}
    skew = [v - t[op, p, n, "back-to-back"] for (op, p, n, way), v in t.items()
            if op == "allreduce" and way == "separated"]
    assert f"{min(skew):.0f}-{max(skew):.0f} µs" in text, text


@slow
def test_tables_have_the_papers_rows_and_our_algorithms(sim_tables):
    want = {
        "bcast": ["linear", "binary_tree", "binomial", "library"],
        "reduce": ["gather_reduce", "binomial", "recursive_halving", "library"],
        "allreduce": ["recursive_doubling", "ring", "library", "deck_reduce+bcast",
                      "binomial_reduce+bcast"],
        "barrier": ["linear", "tree", "dissemination", "library"],
        "scatter–gather": ["linear", "binomial", "library"],
    }
    assert set(sim_tables) == set(want)
    for op, algs in want.items():
        sizes = ["no data"] if op == "barrier" else ["100 B", "10 KB"]
        assert list(sim_tables[op]) == [(s, a) for s in sizes for a in algs], op
        for col in sim_tables[op].values():
            assert sorted(col) == PS and all(v > 0 for v in col.values())


@slow
def test_reduce_at_the_root_grows_linearly_binomial_like_log_p(sim_tables):
    t = sim_tables["reduce"]
    alpha, beta = platform_alpha_us(), platform_beta_MBps()
    for size, n in (("100 B", 96), ("10 KB", 10240)):
        gather, binomial = t[(size, "gather_reduce")], t[(size, "binomial")]
        msg = alpha + n / beta  # one message across the link
        for p in PS:
            lo, hi = chain(p - 1, msg)
            assert lo <= gather[p] <= hi, (size, p)
            lo, hi = chain(clog2(p), msg)
            assert lo <= binomial[p] <= hi, (size, p)
            assert binomial[p] <= gather[p] * 1.001
        # the butterfly's root takes in about one vector, the root-reduce's p - 1
        halving = t[(size, "recursive_halving")]
        if size == "10 KB":
            assert all(halving[p] < gather[p] for p in PS if p >= 4)


@slow
def test_broadcast_messages_of_a_parent_share_its_link(sim_tables):
    t = sim_tables["bcast"]
    alpha, beta = platform_alpha_us(), platform_beta_MBps()
    for size in ("100 B", "10 KB"):
        lin, bt, bn = (t[(size, a)] for a in ("linear", "binary_tree", "binomial"))
        assert lin[2] == pytest.approx(bt[2], rel=1e-6) == pytest.approx(bn[2], rel=1e-6)
    lin, bt, bn = (t[("100 B", a)] for a in ("linear", "binary_tree", "binomial"))
    for p in PS:  # the root's p - 1 small messages leave together: one α
        lo, hi = chain(1, alpha + (p - 1) * 100 / beta)
        assert lo <= lin[p] <= hi, p
        if p >= 4:  # the trees pay α once per level
            assert lin[p] < min(bt[p], bn[p]), p
    lin, bt, bn = (t[("10 KB", a)] for a in ("linear", "binary_tree", "binomial"))
    for p in PS:
        assert lin[p] == pytest.approx(alpha + (p - 1) * 10240 / beta, rel=0.1), p
        assert bt[p] <= math.floor(math.log2(p)) * (alpha + 2 * 10240 / beta) * 1.01, p
        if p >= 9:  # two children per parent, against ceil(log2 p) at the binomial root
            assert bt[p] < bn[p] < lin[p], p


@slow
def test_barrier_tree_is_slower_than_dissemination(sim_tables):
    t = sim_tables["barrier"]
    tree, diss = t[("no data", "tree")], t[("no data", "dissemination")]
    alpha = platform_alpha_us()
    for p in PS:
        lo, hi = chain(clog2(p), alpha)
        assert lo <= diss[p] <= hi, p
        if p >= 4:
            assert tree[p] > 1.2 * diss[p], p


@slow
def test_model_is_labelled_and_beside_the_simulation():
    nb = executed(LECTURE)
    text = text_of(cell_with(nb, "vs_model = pd.DataFrame(rows)"))
    assert LABEL in text and "Hockney" in text and "a prediction" in text
    for p in (2, 4, 8, 16, 20):
        assert f"p={p} simulated" in text and f"p={p} model" in text
    # the model charges every message in full: exact for the receive-driven reduces, but for
    # the barrier's exit skew of the separated timing (at most about one latency)
    row = re.search(r"^reduce\s+gather_reduce\s+100 B((?:\s+[\d.]+){10})$", text, re.M)
    assert row, text
    values = [float(v) for v in row.group(1).split()]
    for simulated, model in zip(values[::2], values[1::2], strict=True):
        assert model * 0.99 <= simulated <= model * PER_MESSAGE + SKEW, (simulated, model)


@slow
def test_figure_drawn_and_labelled():
    nb = executed(LECTURE)
    cell = cell_with(nb, "fig.suptitle(f\"The DECK paper's sweep")
    assert any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
    assert LABEL in text_of(cell) and "Hockney predictions" in text_of(cell)


@slow
def test_paper_findings_beside_the_simulated_verdicts():
    nb = executed(LECTURE)
    text = text_of(cell_with(nb, "DECK_PAIRS = {"))
    assert LABEL in text
    for name, size in [("scatter–gather", "100 B"), ("scatter–gather", "10 KB"),
                       ("reduce", "100 B"), ("reduce", "10 KB"), ("barrier", "no data")]:
        assert re.search(rf"^{name}, {size} \(\w+ / \w+\): paper: .+\n\s+simulated: ratio ",
                         text, re.M), (name, size)
    # tree barrier: slower from p = 4 (more hops than dissemination), equal at 2 and 3
    assert re.search(r"^barrier.*\n.*equal at 2–3, slower at 4–20$", text, re.M), text
    saw = text_of(cell_with(nb, "held_sim = "))
    assert f"{LABEL}, 20 nodes, 10 KB: broadcast binary tree" in saw
