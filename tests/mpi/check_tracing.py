"""Tracer checks run under mpiexec at an explicit rank count (see tests/test_tracing.py).

A ring allgather written in mpi4py runs on a TracingComm in three styles (Sendrecv,
Isend/Irecv with MPI.Request.Waitall, lowercase sendrecv); each must equal comm.Allgather
and trace to p - 1 steps of one block per rank and step. Prints "OK rank r" on success.
"""

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, finish, rank, size

from mpilab import tracing

BLOCK = 7  # float64 -> 56 bytes per message


def ring_sendrecv(c, send, recv):
    p, r = c.Get_size(), c.Get_rank()
    n = send.size
    recv[r * n:(r + 1) * n] = send
    for k in range(p - 1):
        out, into = (r - k) % p, (r - k - 1) % p
        c.Sendrecv(recv[out * n:(out + 1) * n], (r + 1) % p,
                   recvbuf=recv[into * n:(into + 1) * n], source=(r - 1) % p)
    return recv


def ring_nonblocking(c, send, recv):
    p, r = c.size, c.rank
    n = send.size
    recv[r * n:(r + 1) * n] = send
    for k in range(p - 1):
        out, into = (r - k) % p, (r - k - 1) % p
        reqs = [c.Irecv(recv[into * n:(into + 1) * n], source=(r - 1) % p),
                c.Isend(recv[out * n:(out + 1) * n], dest=(r + 1) % p)]
        MPI.Request.Waitall(reqs)
    return recv


def ring_objects(c, send, recv):
    p, r = c.size, c.rank
    n = send.size
    recv[r * n:(r + 1) * n] = send
    block = send.copy()
    for k in range(p - 1):
        block = c.sendrecv(block, (r + 1) % p, source=(r - 1) % p)
        into = (r - k - 1) % p
        recv[into * n:(into + 1) * n] = block
    return recv


def run(fn):
    send = np.arange(BLOCK, dtype=np.float64) + 100 * rank
    want = np.empty(BLOCK * size)
    comm.Allgather(send, want)
    got = np.full(BLOCK * size, -1.0)
    out = tracing.trace(comm, fn, send, got)
    assert out["error"] is None, out["error"]
    assert np.array_equal(out["result"], want), f"{fn.__name__}: wrong allgather result"
    return out


@check
def sendrecv_ring_is_p_minus_1_steps():
    out = run(ring_sendrecv)
    sched = out["schedule"]
    assert out["steps"] == tracing.steps(sched) == size - 1, out["steps"]
    assert len(sched) == size * (size - 1), sched
    assert all(m["bytes"] == BLOCK * 8 for m in sched), sched
    assert all(m["dst"] == (m["src"] + 1) % size for m in sched), sched
    for s in range(1, size):
        assert sorted(m["src"] for m in sched if m["step"] == s) == list(range(size))
    assert out["untraced"] == []
    assert len(out["events"]) == size and all(len(e) == 2 * (size - 1) for e in out["events"])


@check
def nonblocking_ring_with_plain_waitall():
    out = run(ring_nonblocking)
    assert out["steps"] == size - 1, out["steps"]
    assert sum(m["bytes"] for m in out["schedule"]) == size * (size - 1) * BLOCK * 8


@check
def pickled_ring():
    out = run(ring_objects)
    assert out["steps"] == size - 1, out["steps"]
    assert all(m["bytes"] > BLOCK * 8 for m in out["schedule"]), out["schedule"]  # + pickle


@check
def library_collective_is_listed_as_untraced():
    def lib(c, send, recv):
        c.Allgather(send, recv)
        return recv

    out = run(lib)
    assert out["steps"] == 0 and out["schedule"] == []
    assert out["untraced"] == [(r, "Allgather") for r in range(size)], out["untraced"]


@check
def binomial_broadcast_steps():
    def bcast(c, buf, root):
        p, r = c.size, (c.rank - root) % c.size
        mask = 1
        while mask < p:
            if r & mask:
                c.Recv(buf, source=(r - mask + root) % p)
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            if r + mask < p:
                c.Send(buf, dest=(r + mask + root) % p)
            mask >>= 1
        return buf

    for root in range(size):
        buf = np.full(3, root if rank == root else -1, np.int32)
        out = tracing.trace(comm, bcast, buf, root)
        assert np.all(out["result"] == root)
        assert out["steps"] == (size - 1).bit_length(), (root, out["schedule"])
        assert len(out["schedule"]) == size - 1


@check
def every_wrapped_call_records_its_message():
    right, left = (rank + 1) % size, (rank - 1) % size
    tc = tracing.TracingComm(comm)
    a, b = np.full(4, rank, np.int32), np.empty(4, np.int32)  # 16 B
    tc.Ssend(a, right) if rank % 2 == 0 else tc.Recv(b, source=MPI.ANY_SOURCE)
    tc.Recv(b, source=left) if rank % 2 == 0 else tc.Ssend(a, right)
    assert b[0] == left
    req = tc.Irecv(b, source=left)
    tc.Issend(a, right).Wait()
    while not req.Test():
        pass
    reqs = [tc.Irecv(b, source=left), tc.Isend(a, right)]
    type(reqs[0]).Waitall(reqs)
    buf = np.full(3, rank, np.float64)  # 24 B
    tc.Sendrecv_replace(buf, right, source=left)
    assert buf[0] == left
    tc.Send(a, MPI.PROC_NULL)  # no message: not recorded
    tc.Recv(b, source=MPI.PROC_NULL)
    r = tc.irecv(source=left)
    tc.isend("x", right).wait()
    assert r.wait() == "x"
    ev = tc.events
    pickled = ev[-1][2]
    assert pickled > 0 and ev[-2] == ("send", right, pickled), ev
    first = [("send", right, 16), ("recv", left, 16)]
    want = (first if rank % 2 == 0 else first[::-1]) + [
        ("send", right, 16), ("recv", left, 16), ("send", right, 16), ("recv", left, 16),
        ("send", right, 24), ("recv", left, 24), ("send", right, pickled),
        ("recv", left, pickled)]
    assert ev == want, (ev, want)
    sched = tracing.schedule(comm.allgather(ev))
    # 2 steps for the first exchange (odd ranks forward what they received), then 4 rounds
    assert tracing.steps(sched) == 6, sched
    assert [m["bytes"] for m in sched if m["step"] == 5] == [24] * size, sched
    assert tc.untraced == []
    tc.Barrier()
    assert tc.untraced == ["Barrier"]


@check
def trace_reports_unpaired_messages():
    def lonely(c):
        if c.rank == 0:
            c.send(1, dest=1)  # small: returns at once, nobody receives it
        return c.rank

    out = tracing.trace(comm, lonely)
    assert out["schedule"] is None and out["steps"] is None
    assert "rank 0 event 0" in out["error"] and "never received" in out["error"], out["error"]
    assert out["result"] == rank
    if rank == 1:  # take the stray message, so later checks start clean
        comm.recv(source=0)


finish()
