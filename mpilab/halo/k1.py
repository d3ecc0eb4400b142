"""The K1 experiment: every exchange mode timed by subdomain size, each result checked.

The coarray paper's Table 1, and the SHM-windows paper's S/R against one-sided and
hybrid exchanges (lecture 02); ``python -m mpilab.bench halo`` is its command line. For
each subdomain edge N in `subs`, every rank owns N x N points (global grid ``N * px`` x
``N * py`` on the ``MPI_Dims_create`` process grid) and the compiled kernel
(kernels/stencil or kernels/wave) times steps of exchange + update in every mode and
packing (:func:`mpilab.halo.time_halo`), alternating them in `rounds` rounds so their
ratios are measured under the same load. Each (mode, pack) result is then checked:
against the NumPy serial reference when the global grid is small enough (`check_max`
points), else by heat conservation (heat) or against the kernel run on one rank (wave).
Records carry app, mode, pack, sub, ranks, nx, ny, dims, t_us_min, t_us_median (per
step), quartiles, iters and valid; meta says which machine, MPI, launcher and whether
the run was oversubscribed. :func:`table` is the coarray paper's Table 1: T per step by
subdomain, K1 = T_blocking / T_nonblocking and T_blocking / T_overlap, and, with
one-sided or hybrid modes, T_S/R / T_mode.

:func:`simulate` runs the same C kernels on a simulated platform (SimGrid SMPI,
:func:`mpilab.sim.halo`) and checks each result against the serial reference (the
field's sum after a few steps) where the grid is small enough.

The job's ranks run this module: ``python -m mpilab.halo.k1 --worker ARGS OUT``
(started by :func:`run` through :func:`mpilab.jobs.python_worker`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker, worker_main
from ..netlab import placed
from ..timing import barrier_skew, run_meta, skew_summary
from . import problem
from .parallel import PAGES, gather, run_heat, run_wave, time_halo
from .problem import (
    ALL_MODES,
    MODE_GROUPS,
    MODES,
    PACKS,
    boundary_loss,
    check_onesided,
    serial_heat,
    serial_wave,
)

CHECK_STEPS = 20  # steps of the run each result is checked on
MODULE = "mpilab.halo.k1"  # python -m mpilab.halo.k1 --worker: the job's ranks


def _validate(comm, app, nx, ny, dims, mode, pack, check_max, refs):
    """True on every rank when the parallel result of (mode, pack) is right (collective)."""
    ok = True
    if app == "heat":
        before = gather(comm, *run_heat(comm, nx, ny, CHECK_STEPS - 1, mode=mode,
                                                  pack=pack, dims=dims))
        after = gather(comm, *run_heat(comm, nx, ny, CHECK_STEPS, mode=mode,
                                                 pack=pack, dims=dims))
        if comm.rank == 0:
            want = before.sum() - boundary_loss(before) + 3.0
            ok = bool(np.isclose(after.sum(), want, rtol=1e-12))
            if nx * ny <= check_max:
                if "heat" not in refs:
                    refs["heat"] = serial_heat(nx, ny, CHECK_STEPS)
                ok = ok and bool(np.allclose(after, refs["heat"], rtol=1e-12, atol=1e-12))
    else:
        from mpi4py import MPI

        from ..kernels import wave

        p = gather(comm, *run_wave(comm, nx, ny, CHECK_STEPS, mode=mode, pack=pack,
                                             dims=dims))
        if comm.rank == 0:
            if "wave" not in refs:
                refs["wave"] = (serial_wave(nx, ny, CHECK_STEPS) if nx * ny <= check_max
                                else wave.wave(MPI.COMM_SELF, nx, ny, CHECK_STEPS)[0])
            ok = bool(np.allclose(p, refs["wave"], rtol=1e-12, atol=1e-12))
    return comm.bcast(ok, root=0)


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    skew = barrier_skew(comm)  # how far apart the ranks start a repetition
    records = []
    for sub in a["subs"]:
        recs = time_halo(comm, a["app"], a["modes"], sub, pack=a["packs"],
                         reps=a["reps"], rounds=a["rounds"], min_time=a["min_time"],
                         pages=a.get("pages", "huge-pages"))
        refs: dict = {}
        for r in recs:
            r["valid"] = _validate(comm, a["app"], r["nx"], r["ny"], tuple(r["dims"]),
                                   r["mode"], r["pack"], a["check_max"], refs)
        records.extend(recs)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"records": records, "library": runtime.library_info(),
                       "barrier_skew": skew}, f)
    return 0


def run(subs, *, app="heat", modes=MODES, packs=("datatype",), ranks=2, transport="shm",
        reps=10, rounds=3, min_time=0.005, check_max=1 << 22,
        timeout=1800.0, nodes=None, link="fast-ethernet",
        map_by="node", pages="huge-pages") -> tuple[dict, list[dict]]:
    """Time every (mode, pack) at every subdomain size in one MPI job, each result checked.

    With `nodes`, the ranks run on emulated nodes joined by `link`, placed by `map_by`
    (:func:`mpilab.netlab.placed`); every record says where. The shared-window modes need
    every rank on one node, so they are refused across several.

    Parameters
    ----------
    subs : sequence of int
        Subdomain edges N: N x N points per rank.
    app : str, optional
        ``"heat"`` (the default) or ``"wave"``.
    modes : str or sequence of str, optional
        Among :data:`mpilab.halo.ALL_MODES`, or a group of
        :data:`mpilab.halo.MODE_GROUPS` (``"all"``, ``"classic"``, ``"onesided"``);
        default the two-sided :data:`mpilab.halo.MODES`.
    packs : str or sequence of str, optional
        Among :data:`mpilab.halo.PACKS` (default ``("datatype",)``).
    ranks : int, optional
        MPI ranks (default 2).
    transport : str, optional
        The transport between ranks of one node (default ``"shm"``).
    reps : int, optional
        Timed repetitions per round.
    rounds : int, optional
        Alternations of the modes.
    min_time : float, optional
        Seconds one repetition should last (sets the iterations).
    check_max : int, optional
        Largest global grid (points) checked against the NumPy serial reference; larger
        ones are checked by heat conservation (heat) or against one rank (wave).
    timeout : float, optional
        Seconds the job may run before it is killed (default 1800, as the command
        line's ``--timeout``).
    nodes : int or None, optional
        Emulated nodes (None: this host).
    link : str, optional
        The emulated nodes' link profile (with `nodes`).
    map_by : str, optional
        ``"node"`` (round-robin, the default) or ``"slot"`` (with `nodes`).
    pages : {"huge-pages", "4k-pages"}, optional
        What the heat's two-sided modes compute on (:func:`mpilab.halo.time_halo`):
        ``"4k-pages"`` puts them on the pages a shared window gets where ``/dev/shm``
        takes no huge pages. The heat's records say what every mode's fields got.

    Returns
    -------
    tuple of (dict, list of dict)
        The run's meta (:func:`mpilab.timing.run_meta`, with ``barrier_exit_skew``:
        :func:`mpilab.timing.skew_summary`) and one record per (mode, pack, sub), with
        ``valid``, ``transport``, ``oversubscribed`` and where the ranks ran.

    Raises
    ------
    ValueError
        For bad arguments, or shared-window modes across several nodes.
    """
    if app not in ("heat", "wave"):
        raise ValueError(f"app must be 'heat' or 'wave', got {app!r}")
    modes = validate.names(modes, ALL_MODES, "mode", MODE_GROUPS)
    packs = validate.names(packs, PACKS, "pack")
    check_onesided(app, modes, packs)
    for name, v in (("ranks", ranks), ("reps", reps), ("rounds", rounds)):
        validate.count(v, name)
    if pages not in PAGES:
        raise ValueError(f"pages must be one of {PAGES}, got {pages!r}")
    if app == "wave" and pages != "huge-pages":
        raise ValueError("the wave's fields are on huge pages only: pages= is the heat's")
    if not subs:
        raise ValueError("no sub sizes given")
    subs = [validate.count(n, "sub") for n in subs]
    shared = [m for m in modes if m in problem.SHARED_WINDOW_MODES]
    if nodes is not None and nodes > 1 and shared:
        raise ValueError(f"modes {', '.join(shared)} share one window among all ranks, "
                         "which needs every rank on one node; across nodes use the "
                         "two-sided or put modes")
    args = {"app": app, "modes": list(modes), "packs": list(packs), "subs": list(subs),
            "reps": reps, "rounds": rounds, "min_time": min_time, "check_max": check_max,
            "pages": pages}
    with placed(ranks, transport, nodes=nodes, link=link, map_by=map_by) as (launch, where):
        doc = python_worker(launch, MODULE, args, timeout)
    records = doc["records"]
    for r in records:
        r["transport"] = transport
        r["oversubscribed"] = launch.oversubscribed
        r.update(where)
    settings = {**args, "check_steps": CHECK_STEPS, **where}
    meta = run_meta(launch, settings, doc["library"])
    if skew_summary([doc.get("barrier_skew")]):
        meta["barrier_exit_skew"] = skew_summary([doc.get("barrier_skew")])
    return meta, records


def k_row(by: dict, sub: int, modes: Sequence[str], ks: Sequence[str],
          widths: tuple[int, int, int] = (10, 18, 12)) -> str:
    """One row of a K table: subdomain `sub`'s time per mode, then T_blocking / T_mode.

    Parameters
    ----------
    by : dict
        The records by ``(mode, sub)``; a record has ``t_us_median``, ``t_us_min`` and
        ``valid``.
    sub : int
        The subdomain edge of the row.
    modes : sequence of str
        The time columns, in order (``-`` where a mode has no record).
    ks : sequence of str
        The modes whose ratio to ``blocking`` follows, from the medians and the minima.
    widths : (int, int, int), optional
        Widths of the ``sub`` column, of a time and of a median ratio.

    Returns
    -------
    str
        The row, ``INVALID: modes`` at its end where a record failed its check.
    """
    w_sub, w_t, w_k = widths
    line = f"{str(sub) + '^2':>{w_sub}} " + " ".join(
        f"{by[(m, sub)]['t_us_median']:>{w_t}.2f}" if (m, sub) in by else f"{'-':>{w_t}}"
        for m in modes)
    for m in ks:
        if ("blocking", sub) in by and (m, sub) in by:
            b, r = by[("blocking", sub)], by[(m, sub)]
            line += (f" {b['t_us_median'] / r['t_us_median']:>{w_k}.3f}"
                     f" {b['t_us_min'] / r['t_us_min']:>6.2f}")
        else:
            line += f" {'-':>{w_k}} {'-':>6}"
    bad = [m for m in modes if (m, sub) in by and not by[(m, sub)].get("valid", False)]
    if bad:
        line += "  INVALID: " + ",".join(bad)
    return line


def table(records: list[dict]) -> str:
    """The coarray paper's Table 1: time per step by subdomain, and the K1 ratios.

    T columns are medians; each ratio T_blocking / T_mode is given from the medians and
    from the best repetitions (``min``), which a busy machine disturbs less. With
    ``sendrecv`` and one-sided modes, a second table gives T_sendrecv / T_mode the same
    two ways (above 1: the one-sided exchange is faster); without ``sendrecv``,
    ``blocking`` (the paper's S/R, MPI_Send / MPI_Recv) stands in.

    Parameters
    ----------
    records : list of dict
        What :func:`run` or :func:`simulate` returned.

    Returns
    -------
    str
        One table per pack (a result that failed its check is marked ``INVALID``).
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
        lines += [k_row(by, sub, modes, ks) for sub in sorted({r["sub"] for r in rows})]
        lines += _onesided_ratios(rows, modes, by)
    return "\n".join(lines)


def _onesided_ratios(rows: list[dict], modes: list[str], by: dict) -> list[str]:
    """T_S/R / T_mode for each one-sided or hybrid mode, median and (min), by subdomain;
    S/R is ``sendrecv`` if measured, else ``blocking``."""
    one = [m for m in modes if m in problem.ONESIDED_MODES + problem.HYBRID_MODES]
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
             map_by: str = "slot", check_max: int = 1 << 22,
             progress=None) -> tuple[dict, list[dict]]:
    """The K1 table on a simulated platform (:func:`mpilab.sim.halo`), results checked.

    Parameters
    ----------
    subs : sequence of int
        Subdomain edges N: N x N points per rank.
    platform : str
        A simulated platform (:func:`mpilab.sim.platforms`).
    app : str, optional
        ``"heat"`` (the default) or ``"wave"``.
    modes : str or sequence of str, optional
        ``"all"`` (:data:`mpilab.sim.SIMULATED_HALO_MODES`, the default), ``"classic"``
        or modes of :data:`mpilab.halo.MODES`.
    ranks : int, optional
        Simulated ranks (default 4).
    map_by : str, optional
        ``"slot"`` (node after node, the default) or ``"node"``.
    check_max : int, optional
        Largest global grid (points) whose sum is checked against the serial reference.
    progress : callable or None, optional
        Called with a line of text as each simulation starts (None: silent).

    Returns
    -------
    tuple of (dict, list of dict)
        The simulation's meta (:func:`mpilab.sim.meta`, with ``ranks`` and ``wall_s``)
        and its records, each with ``reference_sum`` and ``valid``.
    """
    from .. import sim

    t0 = time.perf_counter()
    modes = (list(sim.SIMULATED_HALO_MODES) if modes == "all"
             else validate.names(modes, MODES, "mode", {"classic": problem.CLASSIC_MODES}))
    recs = []
    for sub in subs:
        for r in sim.halo(app, modes, ranks=ranks, platform=platform, sub=sub, map_by=map_by,
                          progress=progress):
            ref = None
            if r["nx"] * r["ny"] <= check_max:
                field = (serial_heat(r["nx"], r["ny"], r["steps"]) if app == "heat"
                         else serial_wave(r["nx"], r["ny"], r["steps"]))
                ref = float(np.sum(field))
            r["reference_sum"] = ref
            r["valid"] = bool(np.isfinite(r["sum"])) and (
                ref is None or abs(r["sum"] - ref) <= 1e-9 * max(1.0, abs(ref)))
            recs.append(r)
    m = sim.meta(platform, app=app, ranks=ranks, subs=list(subs), map_by=map_by)
    m.update(ranks=ranks, wall_s=time.perf_counter() - t0)
    return m, recs


if __name__ == "__main__":
    sys.exit(worker_main(_worker, "mpilab.halo.k1"))
