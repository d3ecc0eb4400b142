"""A coarray-style view over an MPI window: ``a[k][i] = v`` is a Put, ``sync_all`` a Fence.

Coarray Fortran gives every *image* (process) its own copy of a coarray and lets any
image address another's copy with a *codimension*: ``x(:)[k] = y`` stores ``y`` into
image ``k``'s ``x``, ``y = x(2)[k]`` loads from it, and ``sync all`` ends a *segment*
after which every image sees what the others stored. Underneath (OpenCoarrays) that is
MPI one-sided communication: the store is a ``MPI_Put``, the load a ``MPI_Get``, and
``sync all`` completes them. :class:`CoArray` spells this out for mpi4py code::

    a = CoArray(comm, (4,), np.float64)   # collective: one window, one block per image
    a.local[:] = a.this_image            # my own copy, a plain NumPy array
    a.sync_all()                         # segment ends: everybody's local writes are done
    a[right][0] = a.local[1:2]           # x(1)[right] = x(2): an MPI_Put into `right`
    got = a[left][1:3]                   # y = x(2:3)[left]: an MPI_Get from `left`
    a.sync_all()                         # Fence: the Put has landed, `got` is filled
    a.free()

Images are numbered **from 1**, as in Fortran (``this_image()`` is ``comm.rank + 1``);
indices inside an image are NumPy's, from 0, over the local shape: integers, slices
(with steps) and tuples of them. Fancy indexing (index arrays, masks) is refused.

Semantics, the same as lecture 03's fence epochs:

* the object is created collectively and opens an epoch with ``Fence``; every
  :meth:`CoArray.sync_all` closes it and opens the next one (collective, like
  ``sync all``);
* ``a[k][index] = values`` starts a Put into image ``k``; it is complete, and visible in
  ``k``'s :attr:`CoArray.local`, only after the next :meth:`~CoArray.sync_all`;
* ``a[k][index]`` starts a Get and returns the NumPy array it will fill; its values are
  defined only after the next :meth:`~CoArray.sync_all` (Fortran's ``y = x[k]`` waits
  for the data; an RMA Get inside a fence epoch cannot);
* within one segment an image must not write ``local`` where a Put or Get of the
  segment touches it, and two Puts to one element conflict (undefined result), as in
  Fortran, where both are data races.

A contiguous section goes as one Put or Get of ``count`` elements; a strided one (a
column of a C-order 2-D array, ``a[k][:, 0]``) as one Put or Get with an indexed MPI
datatype, so the library moves it in one operation, not element by element.

Errors: a bad image number, index or value shape raises ``ValueError``/``IndexError``
on the calling image, before any MPI call (the other images are not told: an image
that then skips :meth:`~CoArray.sync_all` would leave them waiting, so call it from a
timed-out context such as ``%%mpi --timeout``). Using a freed CoArray raises
``RuntimeError``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

__all__ = ["CoArray"]


def _is_basic(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is Ellipsis or isinstance(p, slice)
               or (isinstance(p, (int, np.integer)) and not isinstance(p, bool))
               for p in parts)


class _Image:
    """Image ``k`` of a :class:`CoArray`: indexing it does a Get, assigning a Put."""

    __slots__ = ("_co", "_rank")

    def __init__(self, co: CoArray, rank: int):
        self._co, self._rank = co, rank

    def __getitem__(self, index) -> np.ndarray:
        return self._co._get(self._rank, index)

    def __setitem__(self, index, values) -> None:
        self._co._put(self._rank, index, values)

    def __repr__(self) -> str:
        return f"<image {self._rank + 1} of {self._co!r}>"


class CoArray:
    """A coarray: one NumPy block per image, in an MPI window, addressed as ``a[k][i]``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The images (an intracommunicator); the call is collective over it.
    shape : int or tuple of int
        Shape of every image's block (the same on all images).
    dtype : numpy dtype, optional
        Element type (default float64); the block starts zeroed.

    Attributes
    ----------
    local : numpy.ndarray
        This image's block: a view of its window memory.
    this_image, num_images : int
        Fortran's ``this_image()`` (``comm.rank + 1``) and ``num_images()``.
    win : mpi4py.MPI.Win
        The window, for the curious.

    Raises
    ------
    ValueError, TypeError
        Bad shape or dtype (before any MPI call).

    Examples
    --------
    >>> with CoArray(comm, 3) as a:                                  # doctest: +SKIP
    ...     right = a.this_image % a.num_images + 1
    ...     a[right][0] = float(a.this_image)  # x(1)[right] = this_image()
    ...     a.sync_all()
    ...     a.local[0]                         # my left neighbour's number
    """

    def __init__(self, comm: MPI.Comm, shape, dtype=np.float64):
        self.win = None
        self._pending: list[np.ndarray] = []  # origin buffers of this segment's Puts
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm)!r}")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1
               for n in shape) or not shape:
            raise ValueError(f"shape must be positive integers, got {shape!r}")
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject or self.dtype.fields is not None:
            raise TypeError(f"dtype must be a plain numeric type, got {self.dtype}")
        self._mpitype = dtlib.from_numpy_dtype(self.dtype)
        self.shape = tuple(int(n) for n in shape)
        self.comm = comm
        self.this_image, self.num_images = comm.rank + 1, comm.size
        size = int(np.prod(self.shape))
        item = self.dtype.itemsize
        self.win = MPI.Win.Allocate(size * item, disp_unit=item, comm=comm)
        self.local = np.frombuffer(self.win.tomemory(), dtype=self.dtype,
                                   count=size).reshape(self.shape)
        self.local[...] = 0
        self._offsets = np.arange(size, dtype=np.int64).reshape(self.shape)
        self.win.Fence()  # the first segment starts: everybody's block is zeroed

    # -- images ---------------------------------------------------------------------
    def __getitem__(self, image) -> _Image:
        """Image `image` (1 to ``num_images``): index it to Get, assign to it to Put."""
        self._alive()
        if isinstance(image, bool) or not isinstance(image, (int, np.integer)):
            raise TypeError(f"image must be an integer from 1 to {self.num_images}, "
                            f"got {image!r}")
        if not 1 <= image <= self.num_images:
            raise ValueError(f"image must be from 1 to {self.num_images} (images count "
                             f"from 1, as in Fortran), got {image}")
        return _Image(self, int(image) - 1)

    def _alive(self) -> None:
        if self.win is None:
            raise RuntimeError("this CoArray was freed")

    def _section(self, index) -> np.ndarray:
        """Element offsets (in the target block) of `index`, as an int64 array."""
        if not _is_basic(index):
            raise IndexError(f"index must be integers and slices (Fortran sections), got "
                             f"{index!r}")
        try:
            return self._offsets[index]
        except IndexError as exc:
            raise IndexError(f"index {index!r} is outside the block of shape "
                             f"{self.shape}: {exc}") from None

    def _target(self, offsets: np.ndarray):
        """(target spec for Put/Get, datatype to free or None)."""
        offsets = np.asarray(offsets)
        # `offsets` is a view of the C-order arange `_offsets`, so its values step by one
        # exactly when the view is C-contiguous: the flag says it at no cost, where
        # comparing the offsets made temporaries as large as the section on every store
        # and load (for a 1 MiB section, fresh pages faulted in, every call).
        if offsets.flags.c_contiguous:
            return (int(offsets.flat[0]), offsets.size, self._mpitype), None
        dt = self._mpitype.Create_indexed_block(1, offsets.ravel().tolist()).Commit()
        return (0, 1, dt), dt

    def _put(self, rank: int, index, values) -> None:
        self._alive()
        offsets = self._section(index)
        try:
            data = np.ascontiguousarray(np.broadcast_to(np.asarray(values, self.dtype),
                                                        offsets.shape))
        except ValueError:
            raise ValueError(f"values of shape {np.shape(values)} do not fit the section "
                             f"{index!r} of shape {offsets.shape}") from None
        if offsets.size == 0:
            return
        target, dt = self._target(offsets)
        # the origin buffer must live until the epoch closes
        self._pending.append(data)
        self.win.Put([data, offsets.size, self._mpitype], rank, target=target)
        if dt is not None:
            dt.Free()  # safe: MPI keeps the type alive until the Put is done

    def _get(self, rank: int, index) -> np.ndarray:
        self._alive()
        offsets = self._section(index)
        out = np.full(offsets.shape, np.nan if self.dtype.kind in "fc" else 0, self.dtype)
        if offsets.size == 0:
            return out
        target, dt = self._target(offsets)
        self.win.Get([out, offsets.size, self._mpitype], rank, target=target)
        if dt is not None:
            dt.Free()
        return out

    # -- synchronisation ------------------------------------------------------------
    def sync_all(self) -> None:
        """``sync all``: collective; every Put and Get of the segment is complete.

        Raises
        ------
        RuntimeError
            This CoArray was freed (:meth:`free`).
        """
        self._alive()
        self.win.Fence()
        self._pending.clear()

    def free(self) -> None:
        """Close the last segment and free the window (collective; idempotent).

        The window's memory is released: an array taken from :attr:`local` (not a copy)
        must not be used afterwards.
        """
        if self.win is None:
            return
        self.win.Fence()
        self._pending.clear()
        self.local = None
        self.win.Free()
        self.win = None

    def __enter__(self) -> CoArray:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self.win is None else f"image {self.this_image}"
        return (f"CoArray(shape={self.shape}, dtype={self.dtype}, "
                f"images={self.num_images}, {state})")
