"""Lab 07 Part F's check (mpilab.grading.hierarchy): flat binomial against two-level bcast
crossings, on the course's binomial bcast traced here (a real MPI job)."""

import pytest
from conftest import needs_mpi

from mpilab import network
from mpilab.grading import CheckFailed
from mpilab.grading import hierarchy as H

pytestmark = needs_mpi


def right(hosts, root):
    p = len(hosts)
    flat = 0
    for vr in range(1, p):
        src = (vr - (1 << (vr.bit_length() - 1)) + root) % p
        flat += hosts[src] != hosts[(vr + root) % p]
    return flat, len({h for h in hosts} - {hosts[root]})


CASES = [([0, 0, 1, 1], 0), ([0, 1, 0, 1], 0), ([0, 0, 1, 1, 2, 2], 3),
         (["a", "b", "c", "a", "b", "c"], 1), ([0, 0, 0, 0, 1, 1, 1, 1], 5),
         (["x", "y", "y", "y", "y"], 2)]


def test_the_traced_bcast_is_the_binomial_tree():
    sched = network.bcast_schedules(6, (0, 3))
    assert [(m["src"], m["dst"]) for m in sched[0]] == [(0, 1), (0, 2), (1, 3), (0, 4),
                                                         (1, 5)]
    assert {(m["src"], m["dst"]) for m in sched[3]} == {(3, 4), (3, 5), (4, 0), (3, 1),
                                                        (4, 2)}
    with pytest.raises(ValueError, match="not ranks"):
        network.bcast_schedules(4, (4,))


def test_a_right_answer_passes_with_the_counts():
    got = H.check_bcast_crossings(right, CASES)
    assert got[:2] == [(2, 1), (1, 1)]  # block: 0->2 and 1->3 cross; cyclic: 0->1 only
    assert got[4] == (5, 1)  # root 5: the tree's ranks are counted from it


@pytest.mark.parametrize("wrong, hint", [
    (lambda hosts, root: (len(hosts) - 1, len(set(hosts)) - 1), "every message"),
    (lambda hosts, root: (right(hosts, root)[0],
                          sum(h != hosts[root] for h in hosts)), "one message per rank"),
    (lambda hosts, root: (right(hosts, root)[0], len(set(hosts))), "root's own node"),
    (lambda hosts, root: (right(hosts, 0)[0], right(hosts, root)[1]), "relative to the root"),
    (lambda hosts, root: (right(hosts, root)[0] + 0.5, right(hosts, root)[1]), "expected"),
    (lambda hosts, root: right(hosts, root)[0], "a pair"),
])
def test_wrong_answers_fail_with_their_hint(wrong, hint):
    # 3 nodes first: one message per remote rank (4), per node (3) and the answer (2) differ
    with pytest.raises(CheckFailed, match=hint):
        H.check_bcast_crossings(wrong, CASES[2:] + CASES[:2])
