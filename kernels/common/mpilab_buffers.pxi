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


cdef int _check_mpi(int err) except -1:
    if err != 0:
        from mpi4py import MPI as _MPI
        raise _MPI.Exception(err)
    return 0
