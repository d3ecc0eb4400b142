"""Node-aware collectives: Open MPI 5's ``coll/han`` against ``coll/tuned``, side by side.

Open MPI 5 has two components that can run a collective on a communicator whose ranks
sit on several nodes. ``tuned`` (priority 30) runs one flat algorithm over all ranks (a
binomial tree, a ring, ...), chosen by message size and rank count, blind to which ranks
share a node. ``han`` (priority 35, so the default in 5.0.x wherever a communicator has
ranks on more than one node) splits the communicator into a *low* communicator per node
and an *up* communicator of one leader per node, and runs each collective as an
intra-node part (``tuned`` on the low communicator) and an inter-node part among the
leaders (``libnbc``'s non-blocking collectives on the up communicator), in 64 KiB
segments (``coll_han_bcast_segsize``, ``coll_han_allreduce_segsize``). It gives up (and
hands the call back to ``tuned``) when the nodes hold different numbers of ranks.
(Read in ``ompi/mca/coll/han/`` of Open MPI v5.0.10: coll_han_component.c,
coll_han_module.c, coll_han_bcast.c.)

:func:`measure` times both in one MPI job: each gets its own communicator, created after
writing the MPI_T control variable ``coll_han_priority`` (35 for han; 0, below tuned's 30,
for tuned), and every call is timed inside C (:mod:`mpilab.kernels.collectives`). The
same job counts the messages each component sends per call, and how many cross between
nodes, from Open MPI's pml monitoring (``pml_monitoring_messages_count``, an MPI_T
performance variable read before and after a few calls): measured counts, not a model.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import sys
from pathlib import Path

from .. import runtime
from ..collectives import LIBRARY, calibrate, kernel_module
from ..jobs import python_worker, worker_main
from ..timing import barrier_skew, record, run_meta, skew_summary

#: The collectives measured: both components implement them (han's bcast and allreduce).
OPS = ("bcast", "allreduce")
#: The two components, and the coll_han_priority that gives each communicator to it.
COMPONENTS = {"han": 35, "tuned": 0}
MODULE = "mpilab.tuning.hierarchical"  # python -m ... --worker: the job's ranks
COUNTED_CALLS = 4  # calls between the two reads of the message counters


class _Pvar:
    """One of Open MPI's per-peer counters of what this rank sent (MPI_T, pml monitoring):
    ``pml_monitoring_messages_count`` (messages) or ``pml_monitoring_messages_size``
    (bytes)."""

    CLASS_SIZE = 2  # MPI_T_PVAR_CLASS_SIZE in Open MPI's mpi.h

    def __init__(self, comm, name: str):
        from mpi4py import MPI

        lib = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)  # the one loaded
        self.lib, self.size = lib, comm.Get_size()
        provided = ctypes.c_int()
        self._ok(lib.MPI_T_init_thread(MPI.THREAD_SINGLE, ctypes.byref(provided)), "init")
        idx = ctypes.c_int()
        self._ok(lib.MPI_T_pvar_get_index(name.encode(), self.CLASS_SIZE,
                                          ctypes.byref(idx)), "get_index")
        self.session, self.handle = ctypes.c_void_p(), ctypes.c_void_p()
        self._ok(lib.MPI_T_pvar_session_create(ctypes.byref(self.session)), "session")
        self._comm = ctypes.c_void_p(MPI._handleof(comm))  # MPI_Comm is a pointer here
        count = ctypes.c_int()
        self._ok(lib.MPI_T_pvar_handle_alloc(self.session, idx, ctypes.byref(self._comm),
                                             ctypes.byref(self.handle), ctypes.byref(count)),
                 "handle_alloc")
        if count.value != self.size:
            raise RuntimeError(f"{name} has {count.value} values, "
                               f"not {self.size}")
        self._ok(lib.MPI_T_pvar_start(self.session, self.handle), "start")

    @staticmethod
    def _ok(err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"MPI_T {what} failed (error {err}): is Open MPI's pml "
                               "monitoring on (OMPI_MCA_pml_monitoring_enable=1)?")

    def read(self) -> list[int]:
        buf = (ctypes.c_ulonglong * self.size)()
        self._ok(self.lib.MPI_T_pvar_read(self.session, self.handle, buf), "read")
        return list(buf)

    def close(self) -> None:
        self.lib.MPI_T_pvar_stop(self.session, self.handle)
        self.lib.MPI_T_pvar_handle_free(self.session, ctypes.byref(self.handle))
        self.lib.MPI_T_pvar_session_free(ctypes.byref(self.session))
        self.lib.MPI_T_finalize()


def _worker(args_path: str, out_path: str) -> int:
    import numpy as np
    from mpi4py import MPI

    k = kernel_module()
    a = json.loads(Path(args_path).read_text())
    world = MPI.COMM_WORLD
    me = world.Get_rank()
    library = runtime.library_info()
    if library["mpi_library"] != "openmpi" or not library["mpi_version"].startswith("5"):
        if me == 0:  # han's priority, and what it does, are Open MPI 5's: nothing measured
            Path(out_path).write_text(json.dumps({"library": library}))
        return 0
    comms = {}
    for name, priority in COMPONENTS.items():  # read by each new communicator
        k.set_cvar("coll_han_priority", priority)
        comms[name] = world.Dup()
    k.set_cvar("coll_han_priority", COMPONENTS["han"])
    host = world.allgather(MPI.Get_processor_name())
    counters = {"messages": _Pvar(world, "pml_monitoring_messages_count"),
                "bytes": _Pvar(world, "pml_monitoring_messages_size")}
    counts: dict[str, dict[str, list[float]]] = {}
    for op in a["ops"]:
        for n in a["sizes"]:
            for name, comm in comms.items():
                # the calls counted through mpi4py: MPI_Bcast / MPI_Allreduce and nothing
                # else (the timing kernel adds its own allreduce of the times)
                buf, out = np.zeros(n, np.uint8), np.zeros(n, np.uint8)

                def call(comm=comm, op=op, buf=buf, out=out):
                    if op == "bcast":
                        comm.Bcast(buf, root=0)
                    else:
                        comm.Allreduce(buf, out, op=MPI.SUM)

                call()  # han makes its sub-communicators at a first call
                world.Barrier()
                before = {what: c.read() for what, c in counters.items()}
                for _ in range(COUNTED_CALLS):  # back to back: only these calls' sends
                    call()
                after = {what: c.read() for what, c in counters.items()}
                world.Barrier()
                counts[f"{op}:{name}:{n}"] = {
                    what: [(b - c) / COUNTED_CALLS for b, c in zip(after[what], before[what],
                                                            strict=True)]
                    for what in counters}
    for c in counters.values():
        c.close()
    skew = barrier_skew(world)  # how far apart the ranks start a repetition
    iters = {}
    times: dict[str, list[float]] = {}
    for op in a["ops"]:
        for n in a["sizes"]:
            key = f"{op}:{n}"
            iters[key] = calibrate(comms["tuned"], op, LIBRARY, n, min_time=a["min_time"])
    for _ in range(a["rounds"]):
        for op in a["ops"]:
            for n in a["sizes"]:
                for name, comm in comms.items():
                    t = k.time(comm, op, LIBRARY, n, warmup=1, iters=iters[f"{op}:{n}"],
                               reps=a["reps"])
                    times.setdefault(f"{op}:{name}:{n}", []).extend(t.tolist())
    every = world.gather(counts)
    if me == 0:
        # [src][dst] per key and counter
        sent = {key: {what: [d[key][what] for d in every] for what in counters}
                for key in counts}
        Path(out_path).write_text(json.dumps({
            "hosts": host, "sent": sent, "times": times, "iters": iters,
            "library": library, "barrier_skew": skew}))
    return 0


def crossings(sent: list[list[float]], hosts: list[str]) -> tuple[float, float]:
    """Messages (or bytes) per call in all, and those between ranks on different nodes.

    Parameters
    ----------
    sent : list of list of float
        ``sent[src][dst]``: messages (or bytes) rank `src` sent rank `dst` per call.
    hosts : list of str
        The node (host name) of each rank.

    Returns
    -------
    tuple of (float, float)
        The total per call, and the part of it that crossed between nodes.
    """
    total = sum(sum(row) for row in sent)
    across = sum(c for s, row in enumerate(sent) for d, c in enumerate(row)
                 if hosts[s] != hosts[d])
    return total, across


def measure(ranks: int, sizes, *, ops=OPS, reps: int = 5, rounds: int = 2,
            min_time: float = 0.005, timeout: float = 600.0, transport: str = "shm",
            launch: runtime.Launch | None = None, where: dict | None = None
            ) -> tuple[dict, list[dict]]:
    """Time han and tuned on the same ranks in one job, and count their messages.

    Parameters
    ----------
    ranks : int
        Processes of the MPI job.
    sizes : iterable of int
        Message sizes in bytes (bcast: the message; allreduce: the vector).
    ops : sequence of str, optional
        Collectives among :data:`OPS` (default both).
    reps : int, optional
        Timed repetitions per size, component and round (default 5).
    rounds : int, optional
        Alternations of the two components over all sizes (default 2).
    min_time : float, optional
        Seconds one repetition should last when calibrated, on tuned (default 0.005).
    timeout : float, optional
        Seconds the MPI job may run before it is killed (default 600).
    transport : {"shm", "tcp"}, optional
        Transport between ranks of one node.
    launch : mpilab.runtime.Launch, optional
        How to start the ranks (e.g. on emulated nodes, :func:`mpilab.netlab.placed`);
        None: this host.
    where : dict, optional
        Where the ranks run, as :func:`mpilab.netlab.placed` yields it, stored in the
        settings and every record.

    Returns
    -------
    tuple of (dict, list of dict)
        ``meta`` (:func:`mpilab.timing.run_meta`, with ``oversubscribed``) and one record
        per op, component and size: the times per call in µs (``t_us_median``, ...),
        ``messages`` and ``messages_across``, ``bytes_sent`` and ``bytes_across`` (per
        call, counted by the library's pml monitoring) and ``hosts``.

    Raises
    ------
    ValueError
        The library is not Open MPI, or `ops` names a collective outside :data:`OPS`.
    """
    if runtime.selected_library() != "openmpi":
        raise ValueError("han and tuned are Open MPI's components: run with Open MPI 5")
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise ValueError(f"ops must be among {OPS}, got {bad}")
    sizes = [int(n) for n in sizes]
    launch = launch or runtime.launch(ranks, transport)
    job = dataclasses.replace(launch, env={**launch.env,
                                           "OMPI_MCA_pml_monitoring_enable": "1"})
    where = where or {"nodes": 1, "emulated": False}
    doc = python_worker(job, MODULE, {"ops": list(ops), "sizes": sizes, "reps": reps,
                                      "rounds": rounds, "min_time": min_time}, timeout)
    library = doc["library"]
    if "times" not in doc:
        raise ValueError("coll/han against coll/tuned is measured on Open MPI 5; the ranks "
                         f"ran {library['mpi_library_version'][:40]}")
    settings = {"ranks": ranks, "ops": list(ops), "sizes": sizes, "reps": reps,
                "rounds": rounds, "min_time": min_time, "iters": doc["iters"],
                "components": COMPONENTS, "counted_calls": COUNTED_CALLS, **where}
    m = run_meta(job, settings, library)
    m["oversubscribed"] = job.oversubscribed
    if skew_summary([doc.get("barrier_skew")]):
        m["barrier_exit_skew"] = skew_summary([doc.get("barrier_skew")])
    hosts = doc["hosts"]
    records = []
    for op in ops:
        for name in COMPONENTS:
            for n in sizes:
                key = f"{op}:{name}:{n}"
                total, across = crossings(doc["sent"][key]["messages"], hosts)
                nbytes, bytes_across = crossings(doc["sent"][key]["bytes"], hosts)
                records.append(record(
                    doc["times"][key], size_bytes=n, impl=name, op=op, ranks=ranks,
                    iters=doc["iters"][f"{op}:{n}"], oversubscribed=job.oversubscribed,
                    messages=total, messages_across=across, bytes_sent=nbytes,
                    bytes_across=bytes_across, hosts=hosts,
                    emulated=bool(where.get("emulated"))))
    return m, records


if __name__ == "__main__":
    sys.exit(worker_main(_worker, "mpilab.tuning.hierarchical"))
