"""mpilab.tracing: steps of hand-built schedules, errors, the picture, and real MPI runs."""

from __future__ import annotations

import math

import pytest
from conftest import mpirun, needs_mpi

from mpilab import tracing


def _sendrecv(ev, r, dest, src, nbytes):
    ev[r] += [("send", dest, nbytes), ("recv", src, nbytes)]


def binomial_bcast(p, root=0, nbytes=8):
    ev = [[] for _ in range(p)]
    for vr in range(p):
        r = (vr + root) % p
        mask = 1
        while mask < p:
            if vr & mask:
                ev[r].append(("recv", (vr - mask + root) % p, nbytes))
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            if vr + mask < p:
                ev[r].append(("send", (vr + mask + root) % p, nbytes))
            mask >>= 1
    return ev


def linear_bcast(p, nbytes=8):
    ev = [[("recv", 0, nbytes)] for _ in range(p)]
    ev[0] = [("send", d, nbytes) for d in range(1, p)]
    return ev


def ring_allgather(p, block=8):
    ev = [[] for _ in range(p)]
    for _ in range(p - 1):
        for r in range(p):
            _sendrecv(ev, r, (r + 1) % p, (r - 1) % p, block)
    return ev


def bruck_allgather(p, block=8):
    ev = [[] for _ in range(p)]
    d = 1
    while d < p:
        count = min(d, p - d)
        for r in range(p):
            _sendrecv(ev, r, (r - d) % p, (r + d) % p, count * block)
        d *= 2
    return ev


def recursive_doubling(p, block=8):
    ev = [[] for _ in range(p)]
    d = 1
    while d < p:
        for r in range(p):
            _sendrecv(ev, r, r ^ d, r ^ d, d * block)
        d *= 2
    return ev


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("root", [0, 1])
def test_binomial_broadcast_takes_ceil_log2_steps(p, root):
    sched = tracing.schedule(binomial_bcast(p, root % p))
    assert tracing.steps(sched) == math.ceil(math.log2(p))
    assert len(sched) == p - 1
    assert sorted(m["dst"] for m in sched) == sorted(set(range(p)) - {root % p})


def test_binomial_p8_exact_schedule():
    sched = tracing.schedule(binomial_bcast(8))
    assert tracing.senders_by_step(sched) == {1: [(0, 4)], 2: [(0, 2), (4, 6)],
                                              3: [(0, 1), (2, 3), (4, 5), (6, 7)]}
    assert sched[0] == {"step": 1, "src": 0, "dst": 4, "bytes": 8}
    assert "step 3: 0->1 (8 B)" in tracing.format_schedule(sched)


@pytest.mark.parametrize("p", [2, 5, 8])
def test_linear_broadcast_takes_p_minus_1_steps(p):
    sched = tracing.schedule(linear_bcast(p))
    assert tracing.steps(sched) == p - 1
    assert [m["step"] for m in sched] == list(range(1, p))


def test_ring_p5():
    sched = tracing.schedule(ring_allgather(5, block=24))
    assert tracing.steps(sched) == 4
    assert len(sched) == 20 and {m["bytes"] for m in sched} == {24}
    assert [(m["src"], m["dst"]) for m in sched if m["step"] == 2] == [
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]


@pytest.mark.parametrize("p", [5, 6])
def test_bruck(p):
    sched = tracing.schedule(bruck_allgather(p, block=8))
    assert tracing.steps(sched) == math.ceil(math.log2(p)) == 3
    # the last step sends only the p - 4 blocks still missing
    assert {m["bytes"] for m in sched if m["step"] == 3} == {(p - 4) * 8}
    assert sum(m["bytes"] for m in sched) == p * (p - 1) * 8


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_recursive_doubling(p):
    sched = tracing.schedule(recursive_doubling(p))
    assert tracing.steps(sched) == int(math.log2(p))


def test_dict_input_self_messages_and_empty():
    ev = {0: [("send", 0, 8), ("recv", 0, 8), ("send", 1, 4)], 1: [("recv", 0, 4)]}
    assert tracing.schedule(ev) == [{"step": 1, "src": 0, "dst": 1, "bytes": 4}]
    assert tracing.schedule([[], []]) == [] and tracing.steps([]) == 0
    assert "no messages" in tracing.format_schedule([])


def test_numpy_integers_are_accepted_and_bools_are_not():
    import numpy as np

    ev = [[("send", np.int64(1), np.int32(8))], [("recv", np.int16(0), 8)]]
    assert tracing.schedule(ev) == [{"step": 1, "src": 0, "dst": 1, "bytes": 8}]
    with pytest.raises(ValueError, match="peer must be a rank"):
        tracing.schedule([[("send", True, 8)], [("recv", 0, 8)]])


def test_format_schedule_is_cut_after_limit():
    text = tracing.format_schedule(tracing.schedule(linear_bcast(20)), limit=5)
    assert text.count("step ") == 5 and "... and 14 more steps" in text


def test_unmatched_receive_names_rank_and_event():
    ev = linear_bcast(4)
    ev[0].pop()  # rank 3 never gets its message
    with pytest.raises(ValueError, match=r"rank 3 event 0 \('recv', 0, 8\).*never matched"):
        tracing.schedule(ev)


def test_unmatched_send_names_rank_and_event():
    ev = linear_bcast(4)
    ev[0].append(("send", 2, 8))
    with pytest.raises(ValueError, match=r"rank 0 event 3 \('send', 2, 8\).*never received"):
        tracing.schedule(ev)


def test_deadlock_cycle_is_an_error():
    # every rank receives from its left neighbour before sending: a cycle
    ev = [[("recv", (r - 1) % 3, 8), ("send", (r + 1) % 3, 8)] for r in range(3)]
    with pytest.raises(ValueError, match=r"deadlock: ranks 0 -> 2 -> 1 -> 0.*rank 0 event 0"):
        tracing.schedule(ev)


@pytest.mark.parametrize("bad", [[[("put", 1, 8)], []], [[("send", 5, 8)], []],
                                 [[("send", 1, -1)], []], [[("send", 1)], []]])
def test_malformed_events(bad):
    with pytest.raises(ValueError, match="rank 0 event 0"):
        tracing.schedule(bad)


def test_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sched = tracing.schedule(bruck_allgather(6, block=1024))
    ax = tracing.draw(sched, 6)
    labels = [t.get_text() for t in ax.texts if t.get_text()]
    assert len(labels) == len(sched) and len(ax.patches) + len(ax.texts) >= 2 * len(sched)
    assert ax.get_title().startswith("3 steps, 18 messages")
    assert labels[0] == "1 KiB"
    plt.close(ax.figure)
    ax = tracing.draw([], 3, labels=False, title="nothing sent")
    assert ax.get_title() == "nothing sent" and not ax.texts
    plt.close(ax.figure)


@needs_mpi
@pytest.mark.parametrize("ranks", [3, 4])  # oversubscribes 2 cores
def test_tracing_comm_under_mpiexec(ranks):
    res = mpirun("check_tracing.py", ranks, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]
