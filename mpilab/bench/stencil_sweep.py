"""Stencil sweep vs memory copy: is the heat update as fast as moving its bytes?

    python -m mpilab.bench stencil-sweep --nx 4096 --ny 4096 --json OUT

The command line of :mod:`mpilab.halo.stencil_sweep` (what is timed, how the bytes are
counted, why there are two copies): one rank times the compiled heat update of an
``nx`` x ``ny`` grid and two copies of the same number of doubles (``memcopy``,
``store-copy``), alternating in ``--rounds`` rounds; ``--impls stencil,stencil-4k``
times the update on huge pages and on 4 KiB pages instead (what the page kind alone
costs), ``--impls stencil,stencil-noprefetch,store-copy`` the update with and without
its own prefetches beside the copy (what the hardware prefetcher alone gives). Records carry impl, nx, ny, size_bytes, pages, t_us_min, t_us_median and GBps
(from the median); meta as for every benchmark.
"""

from __future__ import annotations

import sys

from ..halo.stencil_sweep import ALL_IMPLS, IMPLS, run, table
from . import finish, parser


def main(argv=None) -> int:
    """``python -m mpilab.bench stencil-sweep``: measure, write the JSON, print the table.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``stencil-sweep`` (None: the process's).

    Returns
    -------
    int
        The exit status: 0, or 2 for bad arguments or a failed job
        (:func:`mpilab.bench.finish`).
    """
    p = parser("stencil-sweep", __doc__, transport=False, reps=15, rounds=2,
               min_time=0.01)
    p.add_argument("--nx", type=int, default=4096)
    p.add_argument("--ny", type=int, default=4096)
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="among " + ", ".join(ALL_IMPLS))
    p.add_argument("--copy", choices=("loop", "memcpy"), default="loop",
                   help="the copy compared with: the compiled loop or libc memcpy")
    a = p.parse_args(argv)

    def measure():
        return run(a.nx, a.ny, impls=a.impls, copy=a.copy,
                   reps=a.reps, rounds=a.rounds, min_time=a.min_time, timeout=a.timeout)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | 1 rank on {m['cores']} cores | "
                f"{m.get('cpu_model', '')}\n" + table(recs))

    return finish("stencil-sweep", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
