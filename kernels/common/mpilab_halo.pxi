# Shared by the halo kernels' wrappers (stencil, wave): the modes, the decomposition check
# and the argument checks of their drivers. Included after mpilab_buffers.pxi (it uses
# _check_count), not imported, so each wrapper stays one compiled module. Everything here
# raises before any MPI call, identically on every rank.
cimport mpilab_halo as _halo
from mpi4py import MPI as _MPI

MODES = {"blocking": _halo.MPILAB_HALO_BLOCKING, "sendrecv": _halo.MPILAB_HALO_SENDRECV,
         "nonblocking": _halo.MPILAB_HALO_NONBLOCKING, "overlap": _halo.MPILAB_HALO_OVERLAP,
         "overlap-test": _halo.MPILAB_HALO_OVERLAP_TEST,
         "persistent": _halo.MPILAB_HALO_PERSISTENT, "neighbor": _halo.MPILAB_HALO_NEIGHBOR}
PACKS = {"datatype": _halo.MPILAB_PACK_DATATYPE, "manual": _halo.MPILAB_PACK_MANUAL,
         "subarray": _halo.MPILAB_PACK_SUBARRAY}
PHASES = ("exchange", "interior", "wait", "boundary", "progress")


def layout(MPI.Comm comm not None, nx, ny, dims=None, mode="nonblocking", pack="datatype"):
    """Check a decomposition; ``(py, px, rows, cols, y0, x0)`` of this rank.

    Raises the same ValueError / TypeError on every rank (no communication).
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if not isinstance(pack, str) or pack not in PACKS:
        raise ValueError(f"pack must be one of {list(PACKS)}, got {pack!r}")
    _check_count(nx, "nx", 1)
    _check_count(ny, "ny", 1)
    size = comm.Get_size()
    if dims is None:
        py, px = _MPI.Compute_dims(size, 2)
    else:
        try:
            py, px = dims
        except (TypeError, ValueError):
            raise TypeError(f"dims must be a pair (py, px), got {dims!r}") from None
        _check_count(py, "dims[0]", 1)
        _check_count(px, "dims[1]", 1)
        if py * px != size:
            raise ValueError(f"dims {tuple(dims)} need {py * px} ranks, the communicator "
                             f"has {size}")
    if px > nx or py > ny:
        raise ValueError(f"a {nx} x {ny} grid cannot be split over a {py} x {px} process "
                         f"grid: every rank needs at least one point per axis")
    rank = comm.Get_rank()
    cy, cx = rank // px, rank % px
    y0 = cy * (ny // py) + min(cy, ny % py)
    x0 = cx * (nx // px) + min(cx, nx % px)
    rows = ny // py + (cy < ny % py)
    cols = nx // px + (cx < nx % px)
    return int(py), int(px), rows, cols, y0, x0


cdef tuple _layout(MPI.Comm comm, nx, ny, dims, mode, pack):
    """:func:`layout` followed by ``(nx, ny)``: what the drivers' ``_run`` reads."""
    return layout(comm, nx, ny, dims, mode, pack) + (nx, ny)


cdef int _check_timing(warmup, iters, reps) except -1:
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    _check_count(reps, "reps", 1)
    return 0


cdef int _check_last(steps, last) except -1:
    """The number of last steps a timeline records (`last`, or all `steps` if None)."""
    _check_count(steps, "steps", 1)
    if last is None:
        last = steps
    _check_count(last, "last", 1)
    if last > steps:
        raise ValueError(f"last={last} is more than steps={steps}")
    return last


cdef object _block(tuple lay):
    """A zeroed flat float64 buffer for this rank's ``(rows, cols)`` block."""
    return _np.zeros(lay[2] * lay[3], dtype=_np.float64)


cdef tuple _placed(object block, tuple lay):
    """``(block, (y0, x0))`` as the drivers return it."""
    return block.reshape(lay[2], lay[3]), (lay[4], lay[5])


cdef object _share_out(object share):
    """`share` checked as a writable one-element float64 array (or None), set to -1."""
    if share is None:
        return None
    if (not isinstance(share, _np.ndarray) or share.dtype != _np.float64
            or share.shape != (1,) or not share.flags.writeable):
        raise TypeError("share must be a writable one-element float64 NumPy array")
    share[0] = -1.0
    return share
