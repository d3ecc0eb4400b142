# Shared argument checks for the kernel wrappers (included, not imported, so each
# wrapper stays one compiled module). Everything here raises before any MPI call.
import numpy as _np

cdef int _INT_MAX = 2147483647


cdef object _as_bytes(object buf, str name, bint writable):
    """Return `buf` as a flat byte memoryview, or raise TypeError."""
    if buf is None:
        raise TypeError(f"{name} must be a buffer (a NumPy array, bytearray, ...), not None")
    try:
        m = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name} must support the buffer protocol, "
                        f"not {type(buf).__name__}") from None
    if not m.c_contiguous:
        raise TypeError(f"{name} must be C-contiguous; use numpy.ascontiguousarray")
    if writable and m.readonly:
        raise TypeError(f"{name} must be writable")
    return m.cast("B") if m.ndim != 1 or m.format != "B" else m


cdef int _check_count(object value, str name, int lowest) except -1:
    if not isinstance(value, (int, _np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if value < lowest or value > _INT_MAX:
        raise ValueError(f"{name} must be between {lowest} and {_INT_MAX}, got {value}")
    return 0


cdef tuple _pair_args(object comm, object sbuf, object rbuf, object nbytes, object rank_a,
                      object rank_b, object warmup, object iters, object reps, str what):
    """The checks of a two-rank timed loop's arguments (the ping-pong, matching): the two
    buffers as byte views, `nbytes` (default: all of `sbuf`) within both, two distinct
    ranks of `comm`, and the loop's counts. Returns (send view, receive view, nbytes)."""
    sv = _as_bytes(sbuf, "sbuf", False)
    rv = _as_bytes(rbuf, "rbuf", True)
    if nbytes is None:
        nbytes = len(sv)
    _check_count(nbytes, "nbytes", 0)
    if nbytes > len(sv) or nbytes > len(rv):
        raise ValueError(f"nbytes={nbytes} is larger than sbuf ({len(sv)} B) "
                         f"or rbuf ({len(rv)} B)")
    size = comm.Get_size()
    if size < 2:
        raise ValueError(f"{what} needs a communicator of at least 2 ranks, got {size}")
    for name, v in (("rank_a", rank_a), ("rank_b", rank_b)):
        _check_count(v, name, 0)
        if v >= size:
            raise ValueError(f"{name}={v} is not a rank of a {size}-rank communicator")
    if rank_a == rank_b:
        raise ValueError("rank_a and rank_b must differ")
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    _check_count(reps, "reps", 1)
    return sv, rv, nbytes


cdef int _check_mpi(int err) except -1:
    if err != 0:
        from mpi4py import MPI as _MPI
        raise _MPI.Exception(err)
    return 0
