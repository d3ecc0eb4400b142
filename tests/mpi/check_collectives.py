"""Collective-kernel checks under mpiexec at an explicit rank count (tests/test_collectives.py).

Every algorithm of every operation is compared with the library's collective of the same
name (through mpi4py; reduce_scatter_block with MPI_Reduce_scatter_block and with
MPI_Reduce_scatter on equal counts) on zero, odd and larger counts, several dtypes, every reduction
operation and roots other than 0. Every rank runs every check; a failure prints
"FAIL <check>: <why>" and the process exits 1; success prints "OK rank <r>".
Optional argument "trace": also check the traced schedules (needs mpilab.tracing).
"""

import sys

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, finish, rank, size

from mpilab.kernels import collectives as K

MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}
COUNTS = [0, 1, 7, 1001]
DTYPES = list(K.DTYPES)


def algs(op):
    return [a for a in K.ALGORITHMS[op] if K.admissible(op, a, size) is None] + [K.LIBRARY]


def roots():
    return sorted({0, size - 1, size // 2})


def data(n, dtype, seed, redop="sum"):
    """Distinct per rank and position; small integers so every reduction is exact."""
    i = np.arange(n)
    if redop == "prod":
        v = 1 + (i + seed) % 2
    else:
        v = (i * 7 + seed * 13) % 50
    return v.astype(dtype)


@check
def bcast_matches_library():
    for alg in algs("bcast"):
        for root in roots():
            for k, n in enumerate(COUNTS):
                dt = DTYPES[(k + root) % len(DTYPES)]
                mine = data(n, dt, 99) if rank == root else np.full(n, 3, dt)
                ref = mine.copy()
                K.run(comm, "bcast", alg, None, mine, root=root)
                comm.Bcast(ref, root=root)
                assert np.array_equal(mine, ref), f"{alg} root={root} n={n} {dt}"


@check
def reduce_and_allreduce_match_library():
    for op in ("reduce", "allreduce"):
        for alg in algs(op):
            for dt in DTYPES:
                for redop in K.REDOPS:
                    for root in roots() if op == "reduce" else [0]:
                        for n in (0, 7, 1001) if dt in ("float64", "int32") else (7,):
                            s = data(n, dt, rank + 1, redop)
                            r = np.full(n, 77, dt)
                            ref = np.full(n, 77, dt)
                            if op == "reduce":
                                K.run(comm, op, alg, s, r, root=root, redop=redop)
                                comm.Reduce(s, ref, op=MPI_OPS[redop], root=root)
                            else:
                                K.run(comm, op, alg, s, r, redop=redop)
                                comm.Allreduce(s, ref, op=MPI_OPS[redop])
                            if op == "allreduce" or rank == root:
                                assert np.array_equal(r, ref), \
                                    f"{op} {alg} {dt} {redop} root={root} n={n}: {r[:8]} {ref[:8]}"
                            else:
                                assert np.all(r == 77), f"{op} {alg} wrote on a non-root"


@check
def scatter_gather_allgather_match_library():
    for op in ("scatter", "gather", "allgather"):
        for alg in algs(op):
            for root in roots() if op != "allgather" else [0]:
                for k, n in enumerate(COUNTS):
                    dt = DTYPES[(k + root + len(alg)) % len(DTYPES)]
                    if op == "scatter":
                        s = data(size * n, dt, 5) if rank == root else None
                        r, ref = np.full(n, 9, dt), np.full(n, 9, dt)
                        K.run(comm, op, alg, s, r, root=root)
                        comm.Scatter(s if rank == root else None, ref, root=root)
                        ok = np.array_equal(r, ref)
                    else:
                        s = data(n, dt, rank + 2)
                        r, ref = np.full(size * n, 9, dt), np.full(size * n, 9, dt)
                        if op == "gather":
                            K.run(comm, op, alg, s, r, root=root)
                            comm.Gather(s, ref if rank == root else None, root=root)
                        else:
                            K.run(comm, op, alg, s, r)
                            comm.Allgather(s, ref)
                        ok = np.array_equal(r, ref)
                    assert ok, f"{op} {alg} root={root} n={n} {dt}: {r[:12]} vs {ref[:12]}"


@check
def alltoall_and_reduce_scatter_block_match_library():
    for alg in algs("alltoall"):
        for k, n in enumerate(COUNTS):
            dt = DTYPES[(k + len(alg)) % len(DTYPES)]
            s = data(size * n, dt, rank + 3)
            r, ref = np.full(size * n, 9, dt), np.full(size * n, 9, dt)
            K.run(comm, "alltoall", alg, s, r)
            comm.Alltoall(s, ref)
            assert np.array_equal(r, ref), f"alltoall {alg} n={n} {dt}: {r[:12]} vs {ref[:12]}"
    for alg in algs("reduce_scatter_block"):
        for dt in DTYPES:
            for redop in K.REDOPS:
                for n in (0, 7, 1001) if dt in ("float64", "int32") else (7,):
                    s = data(size * n, dt, rank + 1, redop)
                    r, ref = np.full(n, 77, dt), np.full(n, 77, dt)
                    K.run(comm, "reduce_scatter_block", alg, s, r, redop=redop)
                    comm.Reduce_scatter_block(s, ref, op=MPI_OPS[redop])
                    assert np.array_equal(r, ref), \
                        f"reduce_scatter_block {alg} {dt} {redop} n={n}: {r[:8]} {ref[:8]}"
                    # and MPI_Reduce_scatter with equal counts gives the same blocks
                    ref2 = np.full(n, 55, dt)
                    comm.Reduce_scatter(s, ref2, [n] * size, op=MPI_OPS[redop])
                    assert np.array_equal(r, ref2), f"{alg} {dt} {redop} n={n} vs Reduce_scatter"


@check
def root_only_buffers_may_be_none():
    root = size - 1
    s = data(size * 3, "int32", 1) if rank == root else None
    r = np.zeros(3, np.int32)
    K.run(comm, "scatter", "binomial", s, r, root=root)
    g = np.zeros(size * 3, np.int32) if rank == root else None
    K.run(comm, "gather", "binomial", r, g, root=root)
    if rank == root:
        assert np.array_equal(g, s)
    red = np.zeros(3, np.int32) if rank == root else None
    K.run(comm, "reduce", "recursive_halving", r, red, root=root)


@check
def barriers_complete_and_order():
    # After the barrier every rank has posted its flag: a rank that passed early would
    # miss a send made just before it by a slower rank (tested with a nonblocking probe).
    for alg in algs("barrier"):
        for _ in range(3):
            K.run(comm, "barrier", alg)
        req = [comm.isend(rank, dest=(rank + 1) % size, tag=55)]
        K.run(comm, "barrier", alg)
        got = comm.recv(source=(rank - 1) % size, tag=55)
        MPI.Request.Waitall(req)
        assert got == (rank - 1) % size


@check
def bytes_like_buffers_are_uint8():
    s = bytearray(range(5))
    r = bytearray(5 * size)
    K.run(comm, "allgather", "ring", s, r)
    assert bytes(r) == bytes(range(5)) * size


@check
def inadmissible_raise_value_error_on_every_rank():
    cases = [("allgather", "two_proc", size != 2),
             ("allgather", "recursive_doubling", size & (size - 1) != 0),
             ("allgather", "neighbor_exchange", size % 2 == 1),
             ("reduce_scatter_block", "recursive_halving", size & (size - 1) != 0)]
    for op, alg, bad in cases:
        s, r = np.zeros(4 * size if op == "reduce_scatter_block" else 4), np.zeros(4 * size)
        if bad:
            try:
                K.run(comm, op, alg, s, r)
            except ValueError as exc:
                assert "process count" in str(exc) or "exactly 2" in str(exc), str(exc)
            else:
                raise AssertionError(f"{alg} on {size} ranks did not raise")
        else:
            K.run(comm, op, alg, s, r)


@check
def bad_arguments_raise_everywhere_without_hanging():
    s, r = np.zeros(4), np.zeros(4 * size)
    for kwargs, exc in [(dict(op="allgather", alg="nope"), ValueError),
                        (dict(op="nope", alg="ring"), ValueError),
                        (dict(op="reduce", alg="binomial", redop="xor"), ValueError),
                        (dict(op="bcast", alg="binomial", root=size), ValueError)]:
        kw = dict(kwargs)
        try:
            K.run(comm, kw.pop("op"), kw.pop("alg"), s, r[:4], **kw)
        except exc:
            pass
        else:
            raise AssertionError(f"{kwargs} did not raise")
    # a bad buffer on one rank only: every rank raises
    short = np.zeros(4 * size - (1 if rank == size - 1 else 0))
    try:
        K.run(comm, "allgather", "ring", s, short)
    except ValueError:
        pass
    else:
        raise AssertionError("a short recvbuf on the last rank did not raise everywhere")
    # dtypes that differ between ranks
    mine = np.zeros(3, np.float64 if rank else np.int64)
    try:
        K.run(comm, "bcast", "linear", None, mine)
    except ValueError:
        assert size > 1
    else:
        assert size == 1, "ranks with different dtypes did not raise"
    try:
        K.run(comm, "allgather", "ring", np.zeros(3, np.complex128), np.zeros(3 * size))
    except TypeError:
        pass
    else:
        raise AssertionError("complex data did not raise TypeError")
    comm.Barrier()


@check
def timing_returns_the_slowest_rank_everywhere():
    for op in K.OPS:
        alg = algs(op)[0]
        t = K.time(comm, op, alg, 5, warmup=1, iters=2, reps=2, root=size - 1)
        every = comm.allgather(t.tolist())
        assert all(x == every[0] for x in every) and np.all(t > 0), every
    t = K.time(comm, "allgather", K.LIBRARY, 8, dtype="float64", iters=2, reps=2)
    assert t.shape == (2,)


@check
def traces_count_bytes_and_pair_up():
    for op in K.OPS:
        for alg in algs(op)[:-1]:
            ev = K.trace(comm, op, alg, 3, dtype="int32", root=size // 2)
            every = comm.allgather(ev)
            sends = sorted((r, e[1], e[2]) for r, evs in enumerate(every) for e in evs
                           if e[0] == "send")
            recvs = sorted((e[1], r, e[2]) for r, evs in enumerate(every) for e in evs
                           if e[0] == "recv")
            assert sends == recvs, f"{op} {alg}: sends and receives do not pair up"
            if op in ("allgather", "alltoall") and size > 1:
                got = sum(e[2] for e in ev if e[0] == "recv")
                assert got >= 12 * (size - 1), f"{alg} received {got} B < the other blocks"


@check
def python_api_runs_times_and_traces():
    from mpilab import collectives as C

    r = C.run(comm, "allgather", "bruck", np.full(3, rank, np.int64), np.zeros(3 * size, np.int64))
    assert np.array_equal(r, np.repeat(np.arange(size), 3))
    recs = C.time_alg(None, "allgather", "ring", [8, 64], reps=2, iters=2)
    assert [x["impl"] for x in recs] == ["mpilab:ring"] * 2
    assert [x["size_bytes"] for x in recs] == [8, 64] and recs[0]["ranks"] == size
    lib = C.time_alg(comm, "bcast", "library", [16], reps=2, min_time=0.0005)
    assert lib[0]["impl"] == "library:default" and lib[0]["iters"] >= 1
    every = comm.allgather([x["t_us_median"] for x in recs + lib])
    assert all(x == every[0] for x in every)
    assert {x["timing"] for x in recs + lib} == {"back-to-back"}
    # one call at a time: an untimed barrier before each, the slowest rank's sum
    sep = C.time_alg(comm, "reduce", "binomial", [16], reps=3, iters=4, separated=True)
    assert sep[0]["timing"] == "separated" and sep[0]["iters"] == 4
    assert len(sep[0]["times_us"]) == 3 and min(sep[0]["times_us"]) > 0
    assert comm.allgather(sep[0]["times_us"]) == [sep[0]["times_us"]] * size
    ev = C.events(comm, "bcast", "linear", 5, root=size - 1)
    assert len(ev) == size and sum(len(e) for e in ev) == 2 * (size - 1)


def trace_steps():
    from mpilab import tracing

    def steps(op, alg, n=8):
        ev = K.trace(comm, op, alg, n)
        return tracing.steps(tracing.schedule(comm.allgather(ev)))

    log2 = (size - 1).bit_length()  # ceil(log2 size)
    assert steps("allgather", "bruck") == log2
    assert steps("bcast", "binomial") == log2
    assert steps("allgather", "ring") == size - 1
    assert steps("bcast", "linear") == size - 1
    if size & (size - 1) == 0:
        assert steps("allgather", "recursive_doubling") == log2
        assert steps("allreduce", "recursive_doubling") == log2
    assert steps("barrier", "dissemination") == log2
    assert steps("alltoall", "pairwise") == size - 1
    assert steps("alltoall", "bruck") == log2
    assert steps("reduce_scatter_block", "ring") == size - 1
    if size & (size - 1) == 0:
        assert steps("reduce_scatter_block", "recursive_halving") == log2
    # and every algorithm's traced depth is the one the registry states
    from mpilab.collectives import ALGORITHMS

    for op, specs in ALGORITHMS.items():
        for alg, spec in specs.items():
            if spec.admissible(size) is None:
                assert steps(op, alg) == spec.steps(size), (op, alg, steps(op, alg))


if "trace" in sys.argv[1:]:
    check(trace_steps)

finish()
