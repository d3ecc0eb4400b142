"""Halo exchange: blocking vs nonblocking vs overlapped, by subdomain size (K1 table).

    python -m mpilab.bench halo --app heat|wave --mode all --sub 16,64,256 --ranks 2 --json OUT
    python -m mpilab.bench halo --app heat --mode sendrecv,onesided --sub 16,64 --json OUT
    python -m mpilab.bench halo --nodes 2 --link gige --ranks 4 --mode all --sub 16,256
    python -m mpilab.bench halo --nodes 2 --ranks 4 --mode blocking,nonblocking,hybrid

The command line of :mod:`mpilab.halo.k1` (what runs on the ranks, how each result is
checked, the records). For each subdomain edge N in `--sub`, every rank owns N x N
points and the compiled kernel times steps of exchange + update in every mode and
packing, alternating them in `--rounds` rounds; each (mode, pack) result is checked
(against the NumPy serial reference up to ``--check-max`` points). The table is the
coarray paper's Table 1: T per step by subdomain, K1 = T_blocking / T_nonblocking and
T_blocking / T_overlap.

``--mode`` takes modes of ``mpilab.halo.ALL_MODES``, ``all`` (the two-sided ones),
``classic`` (the coarray paper's four) and
``onesided`` (the heat's one-sided exchanges: Put + fence / PSCW / lock, shared-memory
windows contiguous or not; ``--pack datatype`` only) and ``hybrid`` (the SHM-windows
paper's S/R + SHM-NC: a shared window per node, messages between nodes). When
``sendrecv`` (else ``blocking``) and one-sided or hybrid modes are measured together, a
second table gives T_S/R / T_mode per subdomain, the SHM-windows paper's comparison of
S/R with RMA, SHM and the hybrid. Across emulated nodes (``--nodes``) every mode runs but
``shm`` and ``shm-nc``, whose one window needs every rank on one node.

    python -m mpilab.bench halo --simulate coarray-paper --app wave --ranks 81 \
        --mode blocking,nonblocking --sub 16,256 --json OUT

``--simulate PLATFORM`` runs the same C kernels on a simulated platform (SimGrid SMPI,
:mod:`mpilab.sim`; the two-sided modes but ``neighbor`` and ``overlap-test``, see
``mpilab.sim.NOT_SIMULATED_HALO_MODES``; ranks placed by ``--map-by``, default slot:
node after node; :func:`mpilab.halo.k1.simulate`). The ranks' computing is measured on
this machine and charged to the simulated clock; each result is checked against the
serial reference (the field's sum after a few steps) where the grid is small enough.
Records carry ``simulated: true``, ``platform`` and ``label``.
"""

from __future__ import annotations

import sys

from ..halo.k1 import run, simulate, table
from ..netlab import where_line
from . import finish, parser, simulated_line, sub_sizes


def main(argv=None) -> int:
    """``python -m mpilab.bench halo``: measure (or simulate), write the JSON, print the tables.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``halo`` (None: the process's).

    Returns
    -------
    int
        The exit status: 0, 1 when a result failed its check, 2 for bad arguments or a
        failed job (:func:`mpilab.bench.finish`).
    """
    p = parser("halo", __doc__, reps=10, rounds=3, min_time=0.005, nodes=True,
               simulate=True)
    p.add_argument("--app", choices=("heat", "wave"), default="heat")
    p.add_argument("--mode", default="all",
                   help="comma-separated modes; all = the two-sided ones (simulated: all "
                        "but neighbor and overlap-test), classic = blocking,sendrecv,nonblocking,overlap, onesided = "
                        "put-fence,put-pscw,put-lock,shm,shm-nc (heat only); hybrid (heat "
                        "only): a shared window per node, messages between nodes")
    p.add_argument("--pack", default="datatype", help="datatype, manual, or all")
    p.add_argument("--sub", default="16,64,256,1024",
                   help="subdomain edges N (N x N points per rank), comma-separated")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--pages", choices=("huge-pages", "4k-pages"), default="huge-pages",
                   help="what the heat's two-sided modes compute on: 4k-pages puts them on "
                        "the pages a shared window gets where /dev/shm takes no huge ones")
    p.add_argument("--check-max", type=int, default=1 << 22,
                   help="largest global grid (points) checked against the NumPy reference")
    a = p.parse_args(argv)
    if a.simulate and a.pages != "huge-pages":
        p.error("--pages is for measured runs: a simulated run charges no page")
    if a.simulate:
        map_by = a.map_by if any(x.startswith("--map-by") for x in (argv or sys.argv)) else "slot"
        return finish("halo", a.json,
                      lambda: simulate(sub_sizes(a.sub), a.simulate, app=a.app, modes=a.mode,
                                       ranks=a.ranks, map_by=map_by, check_max=a.check_max,
                                       progress=lambda text: print("#", text, file=sys.stderr,
                                                                   flush=True)),
                      lambda m, recs: simulated_line(m) + table(recs),
                      ok=lambda recs: all(r["valid"] for r in recs))

    def measure():
        return run(sub_sizes(a.sub), app=a.app, modes=a.mode, packs=a.pack, ranks=a.ranks,
                   transport=a.transport, reps=a.reps, rounds=a.rounds, min_time=a.min_time,
                   check_max=a.check_max, timeout=a.timeout, nodes=a.nodes, link=a.link,
                   map_by=a.map_by, pages=a.pages)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | {a.ranks} ranks on "
                f"{m['cores']} cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + (f" | two-sided fields on {a.pages}" if a.app == "heat" else "")
                + "\n" + where_line(m["settings"]) + table(recs))

    return finish("halo", a.json, measure, show, ok=lambda recs: all(r["valid"] for r in recs))


if __name__ == "__main__":
    sys.exit(main())
