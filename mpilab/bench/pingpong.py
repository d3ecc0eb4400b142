"""Ping-pong: the Cython kernel, the same C loop as a standalone program, and mpi4py.

    python -m mpilab.bench pingpong --transport shm|tcp --sizes 8,1024,4194304 --json OUT
    python -m mpilab.bench pingpong --nodes 2 --link fast-ethernet --mode oneway --copy \
        --sizes 40,80,800,4000,8000,16000,24000,32000     # the ping-pong paper's Table 1

All three run in one invocation with the same iteration counts (calibrated once per
size on the kernel), alternating in `--rounds` rounds, so their ratios are measured
side by side. Records carry impl (kernel, c-standalone, mpi4py), transport, size_bytes,
thread_level, t_us_min, t_us_median, quartiles, spread and bandwidth_MBps; meta says which
machine, MPI and launcher produced them and whether the run was oversubscribed.

``--thread-levels single,funneled`` runs the Python implementations once per level of
``MPI_Init_thread`` in every round (a job each: the level is fixed at start-up), so what a
level costs is measured side by side; records carry ``thread_level`` (asked) and
``thread_provided`` (what MPI gave). The standalone C program always runs at ``single``.

``--ci 0.05`` adds rounds until every median's 95 % confidence interval (order
statistics, :func:`mpilab.timing.median_ci`) is within 5 % of the median, or ``--max-reps``
repetitions; every record carries its interval (``ci_lo_us``, ``ci_hi_us``, ``ci_rel``) and
then ``ci_reached``. ``meta["barrier_exit_skew"]`` is how far apart the two ranks left
the barrier that starts a repetition, measured in every job.

With ``--nodes N`` the two ranks run on emulated nodes (:mod:`mpilab.netlab`, root):
``--map-by node`` puts them on two nodes, across the ``--link``; ``--map-by slot`` both
on node0. Records then carry ``nodes``, ``ranks_per_node``, ``link``, ``map_by``,
``node_of_rank`` and ``shaping`` (what the emulation applied and left out). ``--copy``
also times rank 0's local copy ``a(i) = b(i)`` of each size (impl ``copy``, one rank)
in the same job, and the table adds the paper's ratio transfer / copy.

    python -m mpilab.bench pingpong --simulate this-machine --sizes 8,1048576 --json OUT

``--simulate PLATFORM`` runs the same C loop on a simulated platform (SimGrid SMPI,
:mod:`mpilab.sim`): two ranks on one node and, where the platform has several nodes, one
on each of two; records carry ``simulated: true``, ``platform``, ``label`` and
``placement``. ``this-machine`` is calibrated first from a real ping-pong here when it
has not been, and then the measured times are printed beside the simulated ones.
"""

from __future__ import annotations

import sys

from .. import pingpong, runtime, validate
from ..netlab import where_line
from . import finish, parser, simulated_line


def simulate(sizes, platform: str, *, reps: int = 5) -> tuple[dict, list[dict]]:
    """Simulated ping-pong on `platform`: one node, and across two where it has two.

    On ``this-machine`` the simulation is checked against a real ping-pong of the same C
    loop here (calibrating the platform first if needed): ``meta["check"]`` rows give
    measured, simulated and the error per size.
    """
    import time

    from .. import sim

    t0 = time.perf_counter()
    check = None
    if platform == "this-machine":
        check = sim.check_this_machine(sizes)
    plat = sim.platform(platform)
    recs = sim.pingpong(sizes, platform=plat, reps=reps)
    if plat.nodes > 1:
        recs += sim.pingpong(sizes, platform=plat, across=True, reps=reps)
    m = sim.meta(plat, sizes=list(sizes), reps=reps)
    m["wall_s"] = time.perf_counter() - t0
    if check is not None:
        m["check"] = check
    return m, recs


def sim_table(m: dict, recs: list[dict]) -> str:
    lines = [simulated_line(m).rstrip("\n"),
             f"{'size B':>10} {'placement':>13} {'t_us (simulated)':>17}"]
    for r in recs:
        lines.append(f"{r['size_bytes']:>10} {r['placement']:>13} {r['t_us_median']:>17.3f}")
    if m.get("check"):
        lines.append(f"# this machine, measured vs simulated ({m['label']}):")
        lines.append(f"{'size B':>10} {'measured us':>12} {'simulated us':>13} {'error':>8}")
        for c in m["check"]:
            lines.append(f"{c['size_bytes']:>10} {c['measured_us']:>12.3f} "
                         f"{c['simulated_us']:>13.3f} {c['error']:>+8.1%}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("pingpong", __doc__, reps=7, rounds=2, min_time=0.01, nodes=True,
               simulate=True, sizes="8,1024,65536,1048576,4194304")
    p.add_argument("--impls", default=",".join(pingpong.JOB_IMPLS))
    p.add_argument("--mode", choices=pingpong.MODES, default="roundtrip",
                   help="roundtrip: half a round trip (IMB PingPong, osu_latency); oneway: "
                        "back-to-back blocking sends (the ping-pong paper); window: 64 "
                        "MPI_Isend at a time (osu_bw)")
    p.add_argument("--copy", action="store_true",
                   help="also time rank 0's local copy of each size (transfer / copy ratio)")
    p.add_argument("--thread-levels", default="single",
                   help="MPI_Init_thread levels to compare, comma-separated: "
                        + ", ".join(runtime.THREAD_LEVELS) + " (one job each per round)")
    p.add_argument("--ci", type=float, default=None, metavar="REL",
                   help="add rounds until every median's 95 %% confidence interval is "
                        "narrower than REL times the median (0.05: 5 %%), or --max-reps")
    p.add_argument("--max-reps", type=int, default=200,
                   help="with --ci: the cap on repetitions per record (default 200)")
    a = p.parse_args(argv)
    if a.simulate:
        return finish("pingpong", a.json, lambda: simulate(validate.sizes(a.sizes), a.simulate,
                                                            reps=a.reps), sim_table)

    def measure():
        return pingpong.run_pingpong(validate.sizes(a.sizes), transport=a.transport,
                                     impls=a.impls, mode=a.mode, reps=a.reps,
                                     rounds=a.rounds, min_time=a.min_time, timeout=a.timeout,
                                     nodes=a.nodes, link=a.link, map_by=a.map_by, copy=a.copy,
                                     thread_levels=a.thread_levels, ci=a.ci,
                                     max_reps=a.max_reps)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | 2 ranks on {m['cores']} "
                "cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + "\n" + where_line(m["settings"]) + pingpong.pingpong_table(recs))

    return finish("pingpong", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
