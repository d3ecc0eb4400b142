"""Where a measurement's bytes live (mpilab.buffers): each kind of buffer is what it says,
on the pages it says, and the ping-pong's pair is separate, filled and aligned."""

import os
from pathlib import Path

import numpy as np
import pytest

from mpilab import buffers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", buffers.BUFFER_KINDS)
def test_buffer_kinds_are_what_they_say(kind):
    """Every page touched, the right size; huge pages where asked for and the kernel gives
    them, never where 4 KiB pages were asked for. (A NumPy array's share is its mappings':
    below 4 MiB it asks for none itself, but may sit in a heap that has some.)"""
    mode = buffers.transparent_hugepages()
    for n in (1 << 20, 4 << 20):
        a = buffers.buffer(kind, n)
        assert a.dtype == np.uint8 and a.nbytes == n and a.min() == 1
        share = buffers.huge_page_share(a)
        if mode is None:
            continue  # not Linux: nothing to read
        assert 0.0 <= share <= 1.0
        if kind == "4k-pages":
            assert share == 0.0
        elif kind == "huge-pages" and mode in ("madvise", "always"):
            assert share > 0.9, (n, share)
    with pytest.raises(ValueError, match="buffer kind"):
        buffers.buffer("gigantic", 8)


#: a ping-pong sweep's sizes, as lecture 01 sweeps them (8 B to 4 MiB)
SWEEP = [2**k for k in range(3, 23)]


def test_message_buffers_start_on_a_huge_page_boundary_at_every_size():
    for n in (8, 1 << 20, 4 << 20):
        a = buffers.message_buffer(n)
        assert a.nbytes == n and a.ctypes.data % (2 << 20) == 0 and not a.any()
    assert buffers.message_buffer(0).nbytes == 1  # an empty message still has an address


def test_a_sweeps_buffers_sit_on_one_page_kind_at_every_size():
    """The send and receive buffers of a ping-pong sweep, from 8 B to 4 MiB, all on huge
    pages as /proc/self/smaps reports them (they were on 4 KiB pages below 4 MiB, so the
    sweep switched page kind between 1 and 4 MiB); 4k-pages all on ordinary pages."""
    if buffers.transparent_hugepages() not in ("madvise", "always"):
        pytest.skip("no transparent huge pages to ask for here")
    kept = []  # all alive at once, as a sweep's are in turn: no size reuses another's pages
    huge = {}
    for n in SWEEP:
        s, r = buffers.send_and_receive(n, 0)
        kept += [s, r]
        huge[n] = [buffers.huge_page_share(s), buffers.huge_page_share(r)]
    assert all(x is not None and x > 0.9 for pair in huge.values() for x in pair), huge
    small = {n: [buffers.huge_page_share(a) for a in buffers.send_and_receive(n, 0, "4k-pages")]
             for n in (8, 4096, 1 << 20, 4 << 20)}
    assert all(share == [0.0, 0.0] for share in small.values()), small


def test_a_pingpongs_buffers_are_two_and_carry_the_ranks_byte():
    for kind in buffers.BUFFER_KINDS:
        s, r = buffers.send_and_receive(4096, 2, kind)
        assert s.nbytes == r.nbytes == 4096 and not np.shares_memory(s, r)
        assert (s == 3).all(), kind
    s, _ = buffers.send_and_receive(0, 0)
    assert s.nbytes == 1


def test_doubles_are_float64_of_the_value_on_huge_page_memory():
    d = buffers.doubles(1000, 2.5)
    assert d.dtype == np.float64 and d.size == 1000 and (d == 2.5).all()
    assert d.ctypes.data % (2 << 20) == 0
    assert buffers.doubles(0).size == 1


_SHARED_PROBE = r"""
import mmap, os, subprocess, sys
import numpy as np
from mpilab import buffers
d = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,huge=advise", "tmpfs", d], check=True)
fd = os.open(d + "/window", os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 8 << 20)
m = mmap.mmap(fd, 8 << 20, flags=mmap.MAP_SHARED)
a = np.frombuffer(m, dtype=np.uint8)
m.madvise(mmap.MADV_HUGEPAGE, -a.ctypes.data % (2 << 20), 4 << 20)
a[:] = 1
print(buffers.huge_page_share(a))
"""


def test_huge_pages_of_shared_memory_are_counted(tmp_path):
    """A shared file mapping (as Open MPI maps a shared window from its backing
    directory) on a tmpfs that takes advice (huge=advise), 4 of its 8 MiB advised: smaps
    counts those huge pages as ShmemPmdMapped/FilePmdMapped, not AnonHugePages, and
    huge_page_share reads them (it read 0 when it counted AnonHugePages only). In a
    mount namespace of its own, so the mount goes with the process."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a tmpfs of its own")
    if buffers.transparent_hugepages() not in ("madvise", "always"):
        pytest.skip("no transparent huge pages here")
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                          "-c", _SHARED_PROBE, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if res.returncode != 0 and "mount" in res.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()[-200:]}")
    assert res.returncode == 0, res.stderr
    assert 0.4 < float(res.stdout.strip()) <= 0.6, res.stdout
