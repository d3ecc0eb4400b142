"""Every algorithm of a collective beside the library's, on as many ranks as the machine has:
for a reference run of lecture 06's alltoall and reduce-scatter section on a lent machine
with more cores (none kept yet: the session that wrote this lost its machine first).

    mpiexec -n 16 --bind-to core python scripts/device/collectives_ranks.py \\
        --ops alltoall,reduce_scatter_block --sizes 8,1024,65536,1048576 --json OUT.json

Run under mpiexec directly (no ipyparallel engines, which the lent machine lacks), with the
course's kernels built in place (`setup.py build_ext --inplace`) and the package on
PYTHONPATH. Each rank calls :func:`mpilab.collectives.time_alg`, the function lecture 06's
cells call on the engines: the course's one timing protocol inside C (warm-up, barrier,
timed loop, the slowest rank's time, `--reps` repetitions). Sizes are blocks per rank in
bytes. The algorithms' results are checked against the library's by the test suite
(tests/mpi/check_collectives.py, on up to 8 ranks), not here. The JSON is ``{"meta", "records"}`` as the benches write it (:func:`mpilab.timing.context`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mpi4py import MPI


def main(argv=None) -> int:
    from mpilab import collectives, timing
    from mpilab.runtime import discovery

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="alltoall,reduce_scatter_block")
    ap.add_argument("--sizes", default="8,1024,65536,1048576")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.005)
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    ranks, me = comm.Get_size(), comm.Get_rank()
    sizes = [int(s) for s in a.sizes.split(",")]
    records, problems = [], []
    for op in a.ops.split(","):
        for alg in [*collectives.admissible(op, ranks), "library"]:
            try:
                recs = collectives.time_alg(comm, op, alg, sizes, reps=a.reps,
                                            min_time=a.min_time)
            except Exception as exc:  # one algorithm's failure is a note, not the run's end
                problems.append(f"{op}/{alg}: {type(exc).__name__}: {exc}")
                continue
            records += recs
            if me == 0:
                for r in recs:
                    print(f"{op:22s} {alg:20s} {r['size_bytes']:>9d} B "
                          f"{r['t_us_median']:12.2f} us", flush=True)
    library = discovery.library_info()
    # Under `--bind-to core` each rank's own affinity is one core: the job's cores are the
    # union of the ranks' masks (rank 0's alone made a first run say "1 core, oversubscribed").
    job_cores = set().union(*comm.allgather(sorted(os.sched_getaffinity(0))))
    if me == 0:
        meta = timing.context(ranks=ranks, transport="shm", library=library)
        meta["cores"] = len(job_cores)
        meta["cores_are"] = "the union of the ranks' CPU affinity masks"
        meta["oversubscribed"] = ranks > len(job_cores)
        meta["settings"] = {"ops": a.ops.split(","), "sizes": sizes, "reps": a.reps,
                            "min_time": a.min_time, "ranks": ranks,
                            "sizes_are": "blocks per rank, bytes"}
        meta["command"] = f"mpiexec -n {ranks} --bind-to core python {' '.join(sys.argv)}"
        meta["problems"] = problems
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
        print("problems:", problems or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
