# cython: language_level=3, boundscheck=False, wraparound=False
"""Collective algorithms on point-to-point messages, and the library's own (c_collectives.c).

Every function here is collective over `comm`. Arguments that every rank sees alike (the
operation, algorithm, root, counts of the timing helpers) are checked before any MPI
call; buffers, which differ between ranks, are checked locally and the verdict is shared
with one small allgather before the collective starts, so a bad buffer on one rank
raises on every rank instead of leaving the others waiting.
"""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_collectives as c
import numpy as np

include "mpilab_buffers.pxi"

OPS = ("bcast", "reduce", "allreduce", "barrier", "scatter", "gather", "allgather",
       "alltoall", "reduce_scatter_block")
# algorithm i of an operation is code i + 1 in C; "library" (code 0) is MPI's collective
ALGORITHMS = {
    "bcast": ("linear", "binary_tree", "binomial"),
    "reduce": ("gather_reduce", "binomial", "recursive_halving"),
    "allreduce": ("recursive_doubling", "ring"),
    "barrier": ("linear", "tree", "dissemination"),
    "scatter": ("linear", "binomial"),
    "gather": ("linear", "binomial"),
    "allgather": ("linear", "bruck", "recursive_doubling", "ring", "neighbor_exchange",
                  "two_proc"),
    "alltoall": ("pairwise", "bruck"),
    "reduce_scatter_block": ("ring", "recursive_halving"),
}
LIBRARY = "library"
DTYPES = {"float64": 0, "float32": 1, "int32": 2, "int64": 3, "uint8": 4}
REDOPS = {"sum": 0, "max": 1, "min": 2, "prod": 3}
ROOTED = ("bcast", "reduce", "scatter", "gather")
REDUCING = ("reduce", "allreduce", "reduce_scatter_block")
BLOCKED = ("alltoall", "reduce_scatter_block")  # sendbuf: p blocks of count


def admissible(op, alg, ranks):
    """Why `alg` cannot run `op` on `ranks` processes, or None when it can."""
    if alg == LIBRARY:
        return None
    if op == "allgather":
        if alg == "recursive_doubling" and ranks & (ranks - 1):
            return ("recursive doubling allgather needs a power-of-two process count, "
                    f"got {ranks}")
        if alg == "neighbor_exchange" and ranks % 2:
            return f"neighbor exchange allgather needs an even process count, got {ranks}"
        if alg == "two_proc" and ranks != 2:
            return f"two-proc allgather needs exactly 2 processes, got {ranks}"
    if (op == "reduce_scatter_block" and alg == "recursive_halving"
            and ranks & (ranks - 1)):
        return ("recursive halving reduce-scatter needs a power-of-two process count, "
                f"got {ranks}")
    return None


cdef tuple _codes(str op, str alg, int p, str redop, int root):
    """(op code, alg code, redop code), or raise: the checks every rank makes alike."""
    if op not in ALGORITHMS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if alg != LIBRARY and alg not in ALGORITHMS[op]:
        raise ValueError(f"alg for {op} must be one of {ALGORITHMS[op] + (LIBRARY,)}, "
                         f"got {alg!r}")
    if redop not in REDOPS:
        raise ValueError(f"redop must be one of {tuple(REDOPS)}, got {redop!r}")
    if op in ROOTED and not 0 <= root < p:
        raise ValueError(f"root={root} is not a rank of a {p}-rank communicator")
    why = admissible(op, alg, p)
    if why:
        raise ValueError(why)
    a = 0 if alg == LIBRARY else ALGORITHMS[op].index(alg) + 1
    return OPS.index(op), a, REDOPS[redop]


cdef object _flat(object buf, str name, bint writable):
    """`buf` as a flat NumPy view (no copy), or raise TypeError."""
    if isinstance(buf, np.ndarray):
        a = buf
    else:
        m = _as_bytes(buf, name, writable)
        a = np.frombuffer(m, dtype=np.uint8)
    if not a.flags.c_contiguous:
        raise TypeError(f"{name} must be C-contiguous; use numpy.ascontiguousarray")
    if writable and not a.flags.writeable:
        raise TypeError(f"{name} must be writable")
    if a.dtype.name not in DTYPES:
        raise TypeError(f"{name} has dtype {a.dtype.name}; supported: {tuple(DTYPES)}")
    return a.reshape(-1)


cdef tuple _local_buffers(str op, int me, int p, int root, sendbuf, recvbuf):
    """(send, recv, count, dtype name) for this rank; raises on a bad buffer."""
    at_root = op not in ROOTED or me == root
    s = r = None
    if op == "barrier":
        return None, None, 0, "uint8"
    if op in BLOCKED:
        if sendbuf is None or recvbuf is None:
            raise TypeError(f"{op} needs sendbuf and recvbuf on every rank")
        s = _flat(sendbuf, "sendbuf", False)
        r = _flat(recvbuf, "recvbuf", True)
        if s.size % p:
            raise ValueError(f"sendbuf has {s.size} elements, not {p} equal blocks")
        count, dt = s.size // p, s.dtype.name
        need = p * count if op == "alltoall" else count
        if r.size < need:
            raise ValueError(f"recvbuf has {r.size} elements, {op} of {p} blocks of {count} "
                             f"needs {need}")
    if op in ("bcast", "scatter"):
        if recvbuf is None:
            raise TypeError(f"{op} needs recvbuf on every rank")
        r = _flat(recvbuf, "recvbuf", True)
        count, dt = r.size, r.dtype.name
        if op == "scatter" and at_root:
            if sendbuf is None:
                raise TypeError("scatter needs sendbuf at the root")
            s = _flat(sendbuf, "sendbuf", False)
            if s.size < p * count:
                raise ValueError(f"sendbuf has {s.size} elements; the root of a {p}-rank "
                                 f"scatter of {count} needs {p * count}")
    elif op not in BLOCKED:
        if sendbuf is None:
            raise TypeError(f"{op} needs sendbuf on every rank")
        s = _flat(sendbuf, "sendbuf", False)
        count, dt = s.size, s.dtype.name
        need = p * count if op in ("gather", "allgather") else count
        if at_root:
            if recvbuf is None:
                raise TypeError(f"{op} needs recvbuf" + (" at the root" if op in ROOTED else ""))
            r = _flat(recvbuf, "recvbuf", True)
            if r.size < need:
                raise ValueError(f"recvbuf has {r.size} elements, {op} of {count} on {p} "
                                 f"ranks needs {need}")
    for x in (s, r):
        if x is not None and x.dtype.name != dt:
            raise TypeError(f"sendbuf and recvbuf must have the same dtype, got "
                            f"{s.dtype.name} and {r.dtype.name}")
    if s is not None and r is not None and np.may_share_memory(s, r):
        raise ValueError("sendbuf and recvbuf must not overlap")
    if <long long>p * count * c.mpilab_coll_elem_size(DTYPES[dt]) > _INT_MAX:
        raise ValueError(f"{p} x {count} elements of {dt} exceed 2 GiB")
    return s, r, count, dt


cdef void *_ptr(object a):
    cdef unsigned char[::1] v
    if a is None or a.nbytes == 0:
        return NULL
    v = a.view(np.uint8)
    return <void *>&v[0]


cdef const void *_cptr(object a):
    cdef const unsigned char[::1] v
    if a is None or a.nbytes == 0:
        return NULL
    v = a.view(np.uint8)
    return <const void *>&v[0]


def _decode(long long[:, ::1] ev, int n):
    kinds = ("send", "recv")
    return [(kinds[ev[i, 0]], int(ev[i, 1]), int(ev[i, 2])) for i in range(n)]


def run(MPI.Comm comm not None, str op, str alg, sendbuf=None, recvbuf=None, *, root=0,
        redop="sum", trace=False):
    """Run one collective `op` with algorithm `alg` ("library": MPI's own) over `comm`.

    Buffers follow MPI's collective of the same name, with `count` elements per rank
    block taken from the buffers: bcast works in `recvbuf` (the root's data); reduce and
    allreduce combine `sendbuf` into `recvbuf` with `redop`; scatter sends `p` blocks of
    the root's `sendbuf`; gather and allgather collect `p` blocks of `sendbuf`; alltoall
    sends block j of `sendbuf` (`p` blocks) to rank j, which puts it in block i of its
    `recvbuf` (i the sender); reduce_scatter_block combines block i of every rank's
    `sendbuf` (`p` blocks) into rank i's `recvbuf` (one block), as
    ``MPI_Reduce_scatter_block``. Buffers
    only the root needs may be None elsewhere. Supported dtypes: float64, float32,
    int32, int64, uint8; bytes-like buffers count as uint8.

    Returns None, or with ``trace=True`` this rank's messages in program order as
    ``(kind, peer, nbytes)`` tuples, kind "send" or "recv" (a Sendrecv gives its send
    then its receive). The library's collective cannot be traced.
    """
    cdef int p = comm.Get_size(), me = comm.Get_rank()
    cdef int o, a, ro, cnt, dt, err, r_ = root, n = 0, cap = 0
    cdef long long wb
    cdef const void *sp
    cdef void *rp
    cdef void *wp
    cdef long long *tp = NULL
    cdef long long[:, ::1] ev
    cdef MPI_Comm cc = comm.ob_mpi

    _check_count(root, "root", 0)
    o, a, ro = _codes(op, alg, p, redop, root)
    if trace and alg == LIBRARY:
        raise ValueError("the library's collective cannot be traced; pick an algorithm")
    try:
        s, r, count, dtype = _local_buffers(op, me, p, root, sendbuf, recvbuf)
        mine = (None, count, dtype)
    except (TypeError, ValueError) as exc:
        mine, s, r, count, dtype = (exc, None, None, -1, ""), None, None, -1, ""
    every = comm.allgather((None if mine[0] is None else
                            (type(mine[0]).__name__, str(mine[0])), mine[1], mine[2]))
    if mine[0] is not None:
        raise mine[0]
    for k, (e, cn, d) in enumerate(every):
        if e is not None:
            raise ValueError(f"rank {k} passed a bad buffer ({e[0]}: {e[1]})")
    if len({(cn, d) for _, cn, d in every}) > 1:
        raise ValueError("ranks disagree on count or dtype: "
                         + ", ".join(f"rank {k}: {cn} x {d}" for k, (_, cn, d)
                                     in enumerate(every)))
    cnt, dt = count, DTYPES[dtype]
    wb = c.mpilab_coll_work_bytes(o, a, p, cnt, dt)
    work = np.empty(max(wb, 1), dtype=np.uint8)
    if trace:
        cap = 4 * p + 64
        events = np.zeros((cap, 3), dtype=np.int64)
        ev = events
        tp = &ev[0, 0]
    sp, rp, wp = _cptr(s), _ptr(r), _ptr(work)
    with nogil:
        err = c.mpilab_coll_run(cc, o, a, sp, rp, cnt, dt, ro, r_, wp, tp, cap, &n)
    _check_mpi(err)
    if not trace:
        return None
    if n > cap:
        raise RuntimeError(f"trace overflow: {n} events, room for {cap}")
    return _decode(ev, n)


def _buffers(str op, int p, int count, str dtype):
    """Send and receive buffers big enough for any rank of `op` (p blocks each)."""
    n = p * count if op in ("scatter", "gather", "allgather") + BLOCKED else count
    s = np.ones(max(n, 1), dtype=dtype)[:n]
    r = np.zeros(max(n, 1), dtype=dtype)[:n]
    return s, r


def _check_common(MPI.Comm comm, str op, str alg, count, str dtype, redop, root):
    p = comm.Get_size()
    _check_count(count, "count", 0)
    _check_count(root, "root", 0)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    codes = _codes(op, alg, p, redop, root)
    if <long long>p * count * c.mpilab_coll_elem_size(DTYPES[dtype]) > _INT_MAX:
        raise ValueError(f"{p} x {count} elements of {dtype} exceed 2 GiB")
    return codes


def trace(MPI.Comm comm not None, str op, str alg, count, *, dtype="uint8", root=0,
          redop="sum"):
    """This rank's messages ``(kind, peer, nbytes)`` for one call on `count` elements."""
    _check_common(comm, op, alg, count, dtype, redop, root)
    if alg == LIBRARY:
        raise ValueError("the library's collective cannot be traced; pick an algorithm")
    s, r = _buffers(op, comm.Get_size(), count, dtype)
    if op in ("bcast", "scatter"):
        r = r[:count]
    elif op in ("gather", "allgather"):
        s = s[:count]
    elif op == "reduce_scatter_block":
        r = r[:count]
    return run(comm, op, alg, None if op in ("bcast", "barrier") else s,
               None if op == "barrier" else r, root=root, redop=redop, trace=True)


def time(MPI.Comm comm not None, str op, str alg, count, *, dtype="uint8", root=0,
         redop="sum", warmup=3, iters=10, reps=5, bint separated=False):
    """Time `op` with `alg` on `count` elements per block, inside C (mpilab_timing.h).

    Returns a float64 array of `reps` times in seconds per call, the slowest rank's,
    identical on every rank. Buffers are allocated here. `separated`: an untimed barrier
    before every call, each rank timing its calls only (OSU's way), so successive calls
    of a rooted collective cannot overlap; otherwise the calls run back to back.
    """
    cdef int o, a, ro, cnt, dt, err, w, it, rp_, r_
    cdef long long wb
    cdef double[::1] t
    cdef const void *sp
    cdef void *rbp
    cdef void *wp
    cdef MPI_Comm cc = comm.ob_mpi
    o, a, ro = _check_common(comm, op, alg, count, dtype, redop, root)
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    _check_count(reps, "reps", 1)
    p = comm.Get_size()
    s, r = _buffers(op, p, count, dtype)
    cnt, dt, r_ = count, DTYPES[dtype], root
    wb = c.mpilab_coll_work_bytes(o, a, p, cnt, dt)
    work = np.empty(max(wb, 1), dtype=np.uint8)
    times = np.empty(reps, dtype=np.float64)
    t = times
    w, it, rp_ = warmup, iters, reps
    sp, rbp, wp = _cptr(s), _ptr(r), _ptr(work)
    with nogil:
        if separated:
            err = c.mpilab_coll_time_separated(cc, o, a, sp, rbp, cnt, dt, ro, r_, wp, w, it,
                                               rp_, &t[0])
        else:
            err = c.mpilab_coll_time(cc, o, a, sp, rbp, cnt, dt, ro, r_, wp, w, it, rp_, &t[0])
    _check_mpi(err)
    return times


def set_cvar(str name, value):
    """Write the integer MPI_T control variable `name` (local to this process).

    Open MPI exposes its MCA parameters as control variables; the coll_tuned forced
    algorithms (``coll_tuned_allgather_algorithm``, ...) are writable and read again
    by each new communicator. Raises ValueError when the library has no such
    variable or refuses the write.
    """
    cdef bytes b = name.encode()
    cdef const char *cn = b
    cdef int v, err
    _check_count(value, "value", 0)
    v = value
    with nogil:
        err = c.mpilab_coll_set_cvar_int(cn, v)
    if err != 0:
        raise ValueError(f"cannot set the MPI_T control variable {name!r} to {value} "
                         f"(MPI_T error {err})")


OVERLAP_MODES = ("allreduce", "iallreduce", "iallreduce-test")


def iallreduce_overlap(MPI.Comm comm not None, str mode, n, passes, *, parts=16,
                       m=1 << 18, warmup=2, iters=10):
    """OSU's overlap test for ``MPI_Iallreduce`` (collective): this rank's times.

    Each iteration, after an untimed barrier: ``"allreduce"`` runs ``MPI_Allreduce`` of
    `n` float64 (``MPI_SUM``) and then the computation; ``"iallreduce"`` starts
    ``MPI_Iallreduce``, computes, ``MPI_Wait``; ``"iallreduce-test"`` computes in `parts`
    parts with ``MPI_Test`` after each. The computation is `passes` sweeps of
    ``a = 0.5 a + b`` over `m` doubles (private to the rank).

    Returns ``(times, wrong)``: float64 ``(iters, 3)`` of (total, inside MPI calls,
    computing) seconds of this rank, and how many iterations (warm-up included) gave a
    result other than the exact sum.
    """
    if mode not in OVERLAP_MODES:
        raise ValueError(f"mode must be one of {OVERLAP_MODES}, got {mode!r}")
    _check_count(n, "n", 1)
    _check_count(passes, "passes", 0)
    _check_count(parts, "parts", 1)
    _check_count(m, "m", 1)
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    sb = np.arange(1, n + 1, dtype=np.float64) % 1024  # small integers: exact sums
    rb = np.empty(n, dtype=np.float64)
    a = np.ones(m, dtype=np.float64)
    b = np.full(m, 0.25, dtype=np.float64)
    out = np.zeros((iters, 3), dtype=np.float64)
    cdef double[::1] vs = sb, vr = rb, va = a, vb = b
    cdef double[:, ::1] vo = out
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int md = OVERLAP_MODES.index(mode), n_ = n, m_ = m, ps = passes, pt = parts
    cdef int w = warmup, it = iters, wrong = 0, err
    with nogil:
        err = c.mpilab_iallreduce_overlap(cc, md, &vs[0], &vr[0], n_, &va[0], &vb[0], m_, ps,
                                          pt, w, it, &vo[0, 0], &wrong)
    _check_mpi(err)
    return out, int(wrong)
