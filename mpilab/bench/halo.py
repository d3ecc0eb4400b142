"""Halo exchange: blocking vs nonblocking vs overlapped, by subdomain size (K1 table).

    python -m mpilab.bench halo --app heat|wave --mode all --sub 16,64,256 --ranks 2 --json OUT
    python -m mpilab.bench halo --app heat --mode sendrecv,onesided --sub 16,64 --json OUT
    python -m mpilab.bench halo --nodes 2 --link gige --ranks 4 --mode all --sub 16,256
    python -m mpilab.bench halo --nodes 2 --ranks 4 --mode blocking,nonblocking,hybrid

For each subdomain edge N in `--sub`, every rank owns N x N points (global grid
``N * px`` x ``N * py`` on the ``MPI_Dims_create`` process grid) and the compiled kernel
(kernels/stencil or kernels/wave) times steps of exchange + update in every mode and
packing, alternating them in `--rounds` rounds so their ratios are measured under the same
load. Each (mode, pack) result is then checked: against the NumPy serial reference when
the global grid is small enough (``--check-max`` points), else by heat conservation
(heat) or against the kernel run on one rank (wave). Records carry app, mode, pack, sub,
ranks, nx, ny, dims, t_us_min, t_us_median (per step), quartiles, iters and valid; meta
says which machine, MPI, launcher and whether the run was oversubscribed. The table is
the coarray paper's Table 1: T per step by subdomain, K1 = T_blocking / T_nonblocking and
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
node after node). The ranks' computing is measured on this machine and charged to the
simulated clock; each result is checked against the serial reference (the field's sum
after a few steps) where the grid is small enough. Records carry ``simulated: true``,
``platform`` and ``label``.
"""

from __future__ import annotations

import json
import sys

from .. import runtime, validate
from ..halo import (
    ALL_MODES,
    CLASSIC_MODES,
    HYBRID_MODES,
    MODE_GROUPS,
    MODES,
    ONESIDED_MODES,
    PACKS,
    SHARED_WINDOW_MODES,
    check_onesided,
)
from ..jobs import python_worker
from ..timing import run_meta
from . import TIMEOUT, finish, parser, placed, simulated_line, sub_sizes, where_line

CHECK_STEPS = 20


def _validate(comm, app, nx, ny, dims, mode, pack, check_max, refs):
    """True on every rank when the parallel result of (mode, pack) is right (collective)."""
    import numpy as np

    from .. import halo

    ok = True
    if app == "heat":
        before = halo.gather(comm, *halo.run_heat(comm, nx, ny, CHECK_STEPS - 1, mode=mode,
                                                  pack=pack, dims=dims))
        after = halo.gather(comm, *halo.run_heat(comm, nx, ny, CHECK_STEPS, mode=mode,
                                                 pack=pack, dims=dims))
        if comm.rank == 0:
            want = before.sum() - halo.boundary_loss(before) + 3.0
            ok = bool(np.isclose(after.sum(), want, rtol=1e-12))
            if nx * ny <= check_max:
                if "heat" not in refs:
                    refs["heat"] = halo.serial_heat(nx, ny, CHECK_STEPS)
                ok = ok and bool(np.allclose(after, refs["heat"], rtol=1e-12, atol=1e-12))
    else:
        from mpi4py import MPI

        from ..kernels import wave

        p = halo.gather(comm, *halo.run_wave(comm, nx, ny, CHECK_STEPS, mode=mode, pack=pack,
                                             dims=dims))
        if comm.rank == 0:
            if "wave" not in refs:
                refs["wave"] = (halo.serial_wave(nx, ny, CHECK_STEPS) if nx * ny <= check_max
                                else wave.wave(MPI.COMM_SELF, nx, ny, CHECK_STEPS)[0])
            ok = bool(np.allclose(p, refs["wave"], rtol=1e-12, atol=1e-12))
    return comm.bcast(ok, root=0)


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from .. import halo

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    records = []
    for sub in a["subs"]:
        recs = halo.time_halo(comm, a["app"], a["modes"], sub, pack=a["packs"],
                              reps=a["reps"], rounds=a["rounds"], min_time=a["min_time"])
        refs: dict = {}
        for r in recs:
            r["valid"] = _validate(comm, a["app"], r["nx"], r["ny"], tuple(r["dims"]),
                                   r["mode"], r["pack"], a["check_max"], refs)
        records.extend(recs)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"records": records, "library": runtime.library_info()}, f)
    return 0


def run(subs, *, app="heat", modes=MODES, packs=("datatype",), ranks=2, transport="shm",
        reps=10, rounds=3, min_time=0.005, check_max=1 << 22,
        timeout=TIMEOUT, nodes=None, link="fast-ethernet",
        map_by="node") -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records).

    With `nodes`, the ranks run on emulated nodes joined by `link`, placed by `map_by`
    (:func:`mpilab.bench.placed`); every record says where. The shared-window modes need
    every rank on one node, so they are refused across several.
    """
    if app not in ("heat", "wave"):
        raise ValueError(f"app must be 'heat' or 'wave', got {app!r}")
    modes = validate.names(modes, ALL_MODES, "mode", MODE_GROUPS)
    packs = validate.names(packs, PACKS, "pack")
    check_onesided(app, modes, packs)
    for name, v in (("ranks", ranks), ("reps", reps), ("rounds", rounds)):
        validate.count(v, name)
    if not subs:
        raise ValueError("no sub sizes given")
    subs = [validate.count(n, "sub") for n in subs]
    shared = [m for m in modes if m in SHARED_WINDOW_MODES]
    if nodes is not None and nodes > 1 and shared:
        raise ValueError(f"modes {', '.join(shared)} share one window among all ranks, "
                         "which needs every rank on one node; across nodes use the "
                         "two-sided or put modes")
    args = {"app": app, "modes": list(modes), "packs": list(packs), "subs": list(subs),
            "reps": reps, "rounds": rounds, "min_time": min_time, "check_max": check_max}
    with placed(ranks, transport, nodes=nodes, link=link, map_by=map_by) as (launch, where):
        doc = python_worker(launch, "mpilab.bench.halo", args, timeout)
    records = doc["records"]
    for r in records:
        r["transport"] = transport
        r["oversubscribed"] = launch.oversubscribed
        r.update(where)
    settings = {**args, "check_steps": CHECK_STEPS, **where}
    return run_meta(launch, settings, doc["library"]), records


def table(records: list[dict]) -> str:
    """The coarray paper's Table 1: time per step by subdomain, and the K1 ratios.

    T columns are medians; each ratio T_blocking / T_mode is given from the medians and
    from the best repetitions (``min``), which a busy machine disturbs less. With
    ``sendrecv`` and one-sided modes, a second table gives T_sendrecv / T_mode the same
    two ways (above 1: the one-sided exchange is faster); without ``sendrecv``,
    ``blocking`` (the paper's S/R, MPI_Send / MPI_Recv) stands in.
    """
    lines = []
    for pack in PACKS:
        rows = [r for r in records if r["pack"] == pack]
        if not rows:
            continue
        modes = [m for m in ALL_MODES if any(r["mode"] == m for r in rows)]
        by = {(r["mode"], r["sub"]): r for r in rows}
        ks = [m for m in ("nonblocking", "overlap") if m in modes] if "blocking" in modes else []
        head = f"{'sub':>10} " + " ".join(f"{'T_' + m + ' (us)':>18}" for m in modes)
        head += "".join(f" {'K1 b/' + m[:7]:>12} {'(min)':>6}" for m in ks)
        lines += [f"# {rows[0]['app']}, pack={pack}, {rows[0]['ranks']} ranks, "
                  "time per step (median)" + ("; K1 = T_blocking / T_mode" if ks else ""),
                  head]
        for sub in sorted({r["sub"] for r in rows}):
            line = f"{str(sub) + '^2':>10} " + " ".join(
                f"{by[(m, sub)]['t_us_median']:>18.2f}" if (m, sub) in by else f"{'-':>18}"
                for m in modes)
            for m in ks:
                if ("blocking", sub) in by and (m, sub) in by:
                    b, r = by[("blocking", sub)], by[(m, sub)]
                    line += (f" {b['t_us_median'] / r['t_us_median']:>12.3f}"
                             f" {b['t_us_min'] / r['t_us_min']:>6.2f}")
                else:
                    line += f" {'-':>12} {'-':>6}"
            bad = [m for m in modes if (m, sub) in by and not by[(m, sub)]["valid"]]
            if bad:
                line += "  INVALID: " + ",".join(bad)
            lines.append(line)
        lines += _onesided_ratios(rows, modes, by)
    return "\n".join(lines)


def _onesided_ratios(rows: list[dict], modes: list[str], by: dict) -> list[str]:
    """T_S/R / T_mode for each one-sided or hybrid mode, median and (min), by subdomain;
    S/R is ``sendrecv`` if measured, else ``blocking``."""
    one = [m for m in modes if m in ONESIDED_MODES + HYBRID_MODES]
    sr = next((m for m in ("sendrecv", "blocking") if m in modes), None)
    if sr is None or not one:
        return []
    short = {"sendrecv": "sr", "blocking": "bl"}[sr]
    lines = [f"# {rows[0]['app']}, T_{sr} / T_mode (median, and from the best "
             "repetitions); above 1: the one-sided or hybrid mode is faster",
             f"{'sub':>10}" + "".join(f" {short + '/' + m:>12} {'(min)':>6}" for m in one)]
    for sub in sorted({r["sub"] for r in rows}):
        line = f"{str(sub) + '^2':>10}"
        for m in one:
            if (sr, sub) in by and (m, sub) in by:
                b, r = by[(sr, sub)], by[(m, sub)]
                line += (f" {b['t_us_median'] / r['t_us_median']:>12.3f}"
                         f" {b['t_us_min'] / r['t_us_min']:>6.2f}")
            else:
                line += f" {'-':>12} {'-':>6}"
        lines.append(line)
    return lines


def simulate(subs, platform: str, *, app: str = "heat", modes="all", ranks: int = 4,
             map_by: str = "slot", check_max: int = 1 << 22) -> tuple[dict, list[dict]]:
    """The K1 table on a simulated platform (:func:`mpilab.sim.halo`), results checked."""
    import time

    import numpy as np

    from .. import halo, sim

    t0 = time.perf_counter()
    modes = (list(sim.SIMULATED_HALO_MODES) if modes == "all"
             else validate.names(modes, MODES, "mode", {"classic": CLASSIC_MODES}))
    recs = []
    for sub in subs:
        for r in sim.halo(app, modes, ranks=ranks, platform=platform, sub=sub, map_by=map_by,
                          progress=lambda text: print("#", text, file=sys.stderr, flush=True)):
            ref = None
            if r["nx"] * r["ny"] <= check_max:
                field = (halo.serial_heat(r["nx"], r["ny"], r["steps"]) if app == "heat"
                         else halo.serial_wave(r["nx"], r["ny"], r["steps"]))
                ref = float(np.sum(field))
            r["reference_sum"] = ref
            r["valid"] = bool(np.isfinite(r["sum"])) and (
                ref is None or abs(r["sum"] - ref) <= 1e-9 * max(1.0, abs(ref)))
            recs.append(r)
    m = sim.meta(platform, app=app, ranks=ranks, subs=list(subs), map_by=map_by)
    m.update(ranks=ranks, wall_s=time.perf_counter() - t0)
    return m, recs


def main(argv=None) -> int:
    p = parser("halo", __doc__, worker=True, reps=10, rounds=3, min_time=0.005, nodes=True,
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
    p.add_argument("--check-max", type=int, default=1 << 22,
                   help="largest global grid (points) checked against the NumPy reference")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)
    if a.simulate:
        map_by = a.map_by if any(x.startswith("--map-by") for x in (argv or sys.argv)) else "slot"
        return finish("halo", a.json,
                      lambda: simulate(sub_sizes(a.sub), a.simulate, app=a.app, modes=a.mode,
                                       ranks=a.ranks, map_by=map_by, check_max=a.check_max),
                      lambda m, recs: simulated_line(m) + table(recs),
                      ok=lambda recs: all(r["valid"] for r in recs))

    def measure():
        return run(sub_sizes(a.sub), app=a.app, modes=a.mode, packs=a.pack, ranks=a.ranks,
                   transport=a.transport, reps=a.reps, rounds=a.rounds, min_time=a.min_time,
                   check_max=a.check_max, timeout=a.timeout, nodes=a.nodes, link=a.link,
                   map_by=a.map_by)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | {a.ranks} ranks on "
                f"{m['cores']} cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + "\n" + where_line(m["settings"]) + table(recs))

    return finish("halo", a.json, measure, show, ok=lambda recs: all(r["valid"] for r in recs))


if __name__ == "__main__":
    sys.exit(main())
