"""Where a measurement's bytes live: the buffers the course's measurements send and copy.

A message's speed depends on the memory it sits in: Open MPI's single-copy transfer
(``process_vm_readv``) walks the other process's page table, so a large message on 4 KiB
pages moves at about a third of the speed it reaches on transparent huge pages (lecture
01). Every measurement of the course therefore makes its buffers here, of a known kind
(:data:`BUFFER_KINDS`), and can say what the kernel really gave it
(:func:`huge_page_share`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUFFER_KINDS", "message_buffer", "buffer", "huge_page_share",
           "transparent_hugepages", "doubles", "send_and_receive"]

_HUGEPAGE = 1 << 21


def message_buffer(nbytes: int) -> np.ndarray:
    """A zeroed ``uint8`` buffer laid out as the standalone C programs lay theirs out:
    2 MiB aligned and advised to use transparent huge pages (``MADV_HUGEPAGE``) over
    whole 2 MiB extents, at every size, every page written.

    One kind of page at every size, so that a sweep over message sizes changes the size
    and nothing else: Open MPI's single-copy transfer (``process_vm_readv``) walks the
    other process's page table, and a 4 MiB message on 4 KiB pages moved at about a third
    of the speed measured on huge pages. (These buffers were advised from 4 MiB up only,
    so a ping-pong sweep switched page kind between 1 and 4 MiB and its fitted bend mixed
    the pages with the caches.) NumPy advises huge pages for large arrays too, but its
    allocation is rarely 2 MiB aligned, so the advice covers only part of it.

    Parameters
    ----------
    nbytes : int
        Size in bytes (at least one byte is made).

    Returns
    -------
    numpy.ndarray
        ``uint8`` zeros of `nbytes` bytes, a view of a private anonymous mapping; where
        the kernel gives no huge pages (``never``, or none free), ordinary pages:
        :func:`huge_page_share` says which.
    """
    n = max(int(nbytes), 1)
    out = _huge_aligned(n, -(-n // _HUGEPAGE) * _HUGEPAGE)  # whole 2 MiB extents
    out[:] = 0  # written, so that the kernel backs it now, not during a timed loop
    return out


def _huge_aligned(n: int, advised: int) -> np.ndarray:
    """`n` zeroed bytes from a 2 MiB boundary, the first `advised` of them (from the
    boundary) advised ``MADV_HUGEPAGE``."""
    import mmap

    # private: a shared anonymous mapping is shmem, which takes no transparent huge pages
    region = mmap.mmap(-1, max(n, advised) + _HUGEPAGE,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(region, dtype=np.uint8)  # keeps the mapping alive
    start = -whole.ctypes.data % _HUGEPAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            region.madvise(mmap.MADV_HUGEPAGE, start, advised)
        except OSError:  # no transparent huge pages here: ordinary pages
            pass
    return whole[start:start + n]


#: The buffers :func:`buffer` makes: the course's own (2 MiB aligned, huge pages asked
#: for), what a user's NumPy array gets, and ordinary 4 KiB pages only.
BUFFER_KINDS = ("huge-pages", "numpy", "4k-pages")


def buffer(kind: str, nbytes: int) -> np.ndarray:
    """A ``uint8`` buffer of `nbytes` of one of :data:`BUFFER_KINDS`, every page touched.

    ``huge-pages`` starts on a 2 MiB boundary and asks for transparent huge pages over
    whole 2 MiB extents (``MADV_HUGEPAGE``), so even a 1 MiB message sits inside one;
    ``numpy`` is ``np.ones`` as any user writes it (NumPy asks for huge pages only from
    4 MiB up, from its first 4 KiB boundary: numpy/_core/src/multiarray/alloc.c, so the
    kernel backs the whole 2 MiB extents inside it and not its edges); ``4k-pages`` is an
    anonymous mapping advised ``MADV_NOHUGEPAGE``. What the kernel really did:
    :func:`huge_page_share`.

    Parameters
    ----------
    kind : str
        One of :data:`BUFFER_KINDS`: ``"huge-pages"``, ``"numpy"`` or ``"4k-pages"``.
    nbytes : int
        Size in bytes (at least one byte is made).

    Returns
    -------
    numpy.ndarray
        ``uint8`` ones of `nbytes` bytes (writing them touches every page).

    Raises
    ------
    ValueError
        `kind` is not one of :data:`BUFFER_KINDS`.
    """
    import mmap

    n = max(int(nbytes), 1)
    if kind == "huge-pages":
        out = message_buffer(n)
    elif kind == "numpy":
        return np.ones(n, dtype=np.uint8)
    elif kind == "4k-pages":
        region = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            try:
                region.madvise(mmap.MADV_NOHUGEPAGE)
            except OSError:
                pass
        out = np.frombuffer(region, dtype=np.uint8)
    else:
        raise ValueError(f"buffer kind must be one of {BUFFER_KINDS}, got {kind!r}")
    out[:] = 1
    return out


#: smaps' counts of memory on huge pages: private memory, shared memory (/dev/shm, MPI's
#: shared windows) and files
_HUGE_FIELDS = ("AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:")


def huge_page_share(a: np.ndarray) -> float | None:
    """Share of the memory mappings that hold `a` which the kernel backs with transparent
    huge pages (their ``(AnonHugePages + ShmemPmdMapped + FilePmdMapped) / Rss`` in
    /proc/self/smaps, so a shared mapping such as an MPI window counts too; a buffer
    advised in part is split into several mappings); None where the file cannot be read.

    Parameters
    ----------
    a : numpy.ndarray
        An array of this process (its address range is looked up).

    Returns
    -------
    float or None
        Between 0 and 1: huge-page kB over ``Rss`` summed over the mappings `a` overlaps
        (whole mappings, so memory beside `a` in them counts too); None where
        ``/proc/self/smaps`` cannot be read or they hold no resident memory.
    """
    lo_a = a.ctypes.data
    hi_a = lo_a + max(a.nbytes, 1)
    rss = huge = 0
    inside = False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if "-" in head[0] and not head[0].endswith(":"):
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    inside = lo < hi_a and lo_a < hi
                elif inside and head[0] == "Rss:":
                    rss += int(head[1])
                elif inside and head[0] in _HUGE_FIELDS:
                    huge += int(head[1])
    except (OSError, ValueError):
        return None
    return min(1.0, huge / rss) if rss else None


def transparent_hugepages() -> str | None:
    """This kernel's transparent huge page mode: "always", "madvise" or "never".

    Returns
    -------
    str or None
        The bracketed mode in ``/sys/kernel/mm/transparent_hugepage/enabled``; None
        where the file cannot be read (not Linux, no transparent huge pages).
    """
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else None


def doubles(n: int, value: float = 1.0) -> np.ndarray:
    """`n` float64 (at least one) for a measurement, on memory of a known kind: 2 MiB
    aligned and advised to use huge pages (:func:`buffer`), every page touched. A NumPy
    array's pages depend on what was allocated before it (4 KiB pages, or huge pages an
    earlier array left advised), and a large message from 4 KiB pages moves at a third of
    the speed (lecture 01): two buffers of one measurement that got different pages would
    make a model look wrong by that factor.

    Parameters
    ----------
    n : int
        Number of float64 values (at least one is made).
    value : float, optional
        What every element is set to (default 1.0).

    Returns
    -------
    numpy.ndarray
        `n` float64, a view of a ``"huge-pages"`` :func:`buffer`.
    """
    out = buffer("huge-pages", 8 * max(1, int(n))).view(np.float64)
    out[:] = value
    return out


def send_and_receive(nbytes: int, rank: int, kind: str = "huge-pages"):
    """A ping-pong's send and receive buffers of `nbytes` (at least one byte, so an empty
    message has an address), of one of :data:`BUFFER_KINDS` (``huge-pages``: laid out as
    :func:`message_buffer`, on huge pages at every size), the send buffer filled with the rank's byte. Separate
    buffers: receiving into the one a rank sends from costs 1.5-2.5x at 8 KiB-1 MiB.

    Parameters
    ----------
    nbytes : int
        Message size in bytes.
    rank : int
        The calling rank; the send buffer's bytes are ``(rank + 1) & 0xFF``.
    kind : str, optional
        One of :data:`BUFFER_KINDS` (default ``"huge-pages"``).

    Returns
    -------
    send, recv : numpy.ndarray
        Two separate ``uint8`` buffers of `nbytes` bytes: the filled send buffer and the
        receive buffer (zeros for ``"huge-pages"``, ones otherwise).
    """
    make = message_buffer if kind == "huge-pages" else (lambda n: buffer(kind, n))
    s = make(nbytes)
    s[:] = (rank + 1) & 0xFF
    r = make(nbytes)
    return s, r
