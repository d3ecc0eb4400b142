"""Where each rank runs and how fast rank 0 reaches each of the others.

Run by tests/test_netlab.py across emulated nodes. Rank 0 prints one JSON line: every
rank's hostname, network addresses and the median round trip of an 8-byte and a 1 MiB
ping-pong from rank 0 to it (the others wait their turn).
"""

import json
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
where = comm.gather(socket.gethostname(), root=0)


def round_trips(peer: int, nbytes: int, reps: int) -> float:
    buf = np.zeros(nbytes, dtype=np.uint8)
    times = []
    for _ in range(reps):
        if rank == 0:
            t0 = time.perf_counter()
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
            times.append(time.perf_counter() - t0)
        elif rank == peer:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
    return float(np.median(times)) if times else 0.0


rtt = {}
for peer in range(1, size):
    for nbytes, n in ((8, reps), (1 << 20, max(3, reps // 20))):
        comm.Barrier()
        rtt[f"{peer}:{nbytes}"] = round_trips(peer, nbytes, n)
if rank == 0:
    print(json.dumps({"hosts": where, "rtt_s": rtt}), flush=True)
