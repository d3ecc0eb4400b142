"""Rank 0 prints, as JSON, one_way_times of 1 MiB and 4 MiB (the lab 01 grader's sizes)
measured by the course's loop and by a loop of many round trips a repetition, as the
course's once was: 10 round trips, or as many more as make a repetition last 12 ms (longer
than a scheduler's time slice on any machine: on the 2-core Zen 4 EPYC VM 10 round trips
of 4 MiB took only 3.4 ms, a slice was not cut, and the contrast the test looks for was
not there)."""
import json
import math

from mpi4py import MPI

from mpilab.buffers import doubles
from mpilab.pingpong import one_way_times, round_trip
from mpilab.timing import best_us

comm = MPI.COMM_WORLD
sizes = [1 << 20, 4 << 20]
got = one_way_times(comm, sizes)["t_us"]
fixed = []
for n, one_way in zip(sizes, got, strict=True):
    out, into = doubles(n // 8), doubles(n // 8, 0.0)
    trips = max(10, math.ceil(12e3 / (2 * one_way)))  # a repetition of 12 ms or more
    trips = comm.bcast(trips)  # rank 0's, as every rank must loop alike
    fixed.append(best_us(comm, round_trip(comm, out, into), trips, 7) / 2)
if comm.rank == 0:
    print(json.dumps({"sizes": sizes, "course": got, "fixed": fixed}))
