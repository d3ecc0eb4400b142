"""The ``this-machine`` platform calibrated from a real ping-pong, and the checks to make
before believing a scale-out: measured vs simulated on this machine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence

from .. import collectives as _collectives
from .. import jobs, models, runtime, timing, validate
from ..pingpong import measure_standalone
from .experiments import _DTYPE, OUR_ALGORITHMS, _alg_code, collective, pingpong
from .machines import SPEED, _this_machine_path, label

# --------------------------------------------------------------------------- calibration

# Every power of two from 8 B to 1 MiB (18 sizes, under a second on 2 cores). Eight
# sizes spaced 8x apart were too few for the two-line fit to beat one line by the BIC
# margin on most calibrations: one line through the eager curve then put 8 B at +28 to
# +31 % (5 of 8 calibrations on the 2-core Xeon, Open MPI 4.1.4); with 18 sizes the bend
# was found in every one of 3 (4 KiB; 8 B +9 to +11 %, 64 KiB within 1 %).
CALIBRATION_SIZES = tuple(1 << k for k in range(3, 21))


_THIS_MACHINE = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!-- this-machine: written by mpilab.sim.calibrate() on {when} from a real ping-pong
     (2 ranks, shared memory, the course's C kernel) on {host} ({cpu}, {mpi}).
     Fit: {model}.
     Below {switch} B one line, from it another: SMPI's lat/bw factors carry the second.
     Computation runs at this machine's speed (smpi/host-speed = core speed = {speed}). -->
<platform version="4.1">
  <config>
    <prop id="smpi/lat-factor" value="{latf}"/>
    <prop id="smpi/bw-factor" value="{bwf}"/>
    <prop id="network/crosstraffic" value="0"/>
  </config>
  <cluster id="this-machine" prefix="core-host-" suffix="" radical="0-0" speed="{speed}"
           core="{cores}" bw="10GBps" lat="1us" loopback_bw="{bw:.6g}Bps"
           loopback_lat="{lat:.6g}s">
    <prop id="mpilab:description" value="this machine ({cores} cores), calibrated from its own ping-pong"/>
    <prop id="mpilab:source:loopback_lat" value="measured: the fitted ping-pong latency below {switch} B"/>
    <prop id="mpilab:source:loopback_bw" value="measured: the fitted ping-pong bandwidth below {switch} B"/>
  </cluster>
</platform>
"""


def calibrate(*, sizes: Sequence[int] = CALIBRATION_SIZES, reps: int = 5,
              timeout: float = 300, measured: list[dict] | None = None) -> dict:
    """Write the ``this-machine`` platform from a real ping-pong on this machine.

    Measures the course's standalone C ping-pong (2 ranks, shared memory) unless
    `measured` records are given, fits a piecewise Hockney model
    (:func:`mpilab.models.fit_piecewise`: eager and rendezvous lines), and writes a
    platform whose node loopback has the lower line's latency and bandwidth, with SMPI
    latency/bandwidth factors from the switch size on for the upper line.
    Returns ``{"path", "fit", "measured"}``.

    Parameters
    ----------
    sizes : sequence of int, optional
        Message sizes in bytes to measure (default :data:`CALIBRATION_SIZES`, every power
        of two from 8 B to 1 MiB).
    reps : int, optional
        Timed repetitions per size (default 5).
    timeout : float, optional
        Seconds the real ping-pong may run (default 300).
    measured : list of dict, optional
        Ping-pong records (``size_bytes``, ``t_us_median`` one-way) to fit instead of
        measuring; `sizes`, `reps` and `timeout` are then unused.

    Returns
    -------
    dict
        ``"path"`` (str: the platform file written), ``"fit"``
        (:class:`mpilab.models.PiecewiseHockney`) and ``"measured"`` (the records
        fitted).
    """
    recs = measured if measured is not None else measure_standalone(sizes, reps, timeout)
    pw = models.fit_piecewise([r["size_bytes"] for r in recs],
                              [r["t_us_median"] for r in recs])
    low = pw.segments[0]
    lat_s, bw = low.alpha_us * 1e-6, low.beta_MBps * 1e6
    latf, bwf = "0:1", "0:1"
    if pw.switch_bytes is not None:
        high = pw.segments[1]
        latf = f"0:1;{pw.switch_bytes}:{max(high.alpha_us, 1e-3) / low.alpha_us:.6g}"
        bwf = f"0:1;{pw.switch_bytes}:{high.beta_MBps / low.beta_MBps:.6g}"
    info = runtime.machine_info()
    lib = f"{runtime.selected_library()}, {runtime.mpiexec()}"  # no MPI_Init for a label
    path = _this_machine_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_THIS_MACHINE.format(
        when=time.strftime("%Y-%m-%d %H:%M"), host=info["hostname"], cpu=info["cpu_model"],
        mpi=lib, model=pw.model,
        switch=pw.switch_bytes or "-", latf=latf, bwf=bwf, speed=SPEED,
        cores=max(1, runtime.usable_cores()), bw=bw, lat=lat_s))
    tmp.replace(path)
    return {"path": str(path), "fit": pw, "measured": recs}


def check_this_machine(sizes: Sequence[int] = (8, 1024, 65536, 1 << 20), *,
                       recalibrate: bool = False, measured: list[dict] | None = None) -> list[dict]:
    """Measured vs simulated ping-pong on this machine, side by side, with the error.

    Calibrates first when there is no ``this-machine`` platform (or `recalibrate`).
    Rows: size_bytes, measured_us, simulated_us, error (simulated / measured - 1).

    Parameters
    ----------
    sizes : sequence of int, optional
        Message sizes in bytes to compare (default 8 B, 1 KiB, 64 KiB, 1 MiB).
    recalibrate : bool, optional
        Calibrate again even if ``this-machine`` exists (default False).
    measured : list of dict, optional
        Ping-pong records to use instead of measuring (and to calibrate from, when it
        calibrates); sizes they lack are measured.

    Returns
    -------
    list of dict
        One row per size: ``size_bytes``, ``measured_us`` and ``simulated_us`` (median
        one-way µs), ``error`` (simulated / measured - 1: +0.1 is a simulated time 10 % too long) and ``label``.
    """
    cal = None
    if recalibrate or not _this_machine_path().exists():
        cal = calibrate(measured=measured)
    meas = measured or (cal["measured"] if cal else measure_standalone(sizes, 5, 300))
    by = {r["size_bytes"]: r["t_us_median"] for r in meas}
    missing = [n for n in sizes if n not in by]
    if missing:
        by.update({r["size_bytes"]: r["t_us_median"] for r in measure_standalone(missing, 5, 300)})
    sim = {r["size_bytes"]: r["t_us_median"] for r in pingpong(sizes, platform="this-machine")}
    return [{"size_bytes": n, "measured_us": by[n], "simulated_us": sim[n],
             "error": sim[n] / by[n] - 1.0, "label": label("this-machine")} for n in sizes]


def measure_collective(op: str, alg: str, sizes: Iterable[int], *, ranks: int,
                       reps: int = 5, timeout: float = 300) -> list[dict]:
    """The same standalone program measured for real on this machine (not simulated).

    `op` with algorithm `alg` (ours, or ``"library"``: the real library's own) on `ranks`
    real MPI processes of this machine, timed in C exactly as the simulated runs are:
    records as :func:`collective`'s, with ``simulated: False`` and ``oversubscribed``.

    Parameters
    ----------
    op : str
        A key of :data:`OUR_ALGORITHMS` (``"allgather"``, ``"bcast"``, ...).
    alg : str
        One of ``OUR_ALGORITHMS[op]``, or ``"library"``.
    sizes : iterable of int
        Bytes per rank (per block for allgather, gather, scatter), >= 0.
    ranks : int
        Real MPI processes (more than the usable cores: oversubscribed).
    reps : int, optional
        Timed repetitions per size (default 5).
    timeout : float, optional
        Seconds the job may run (default 300).

    Returns
    -------
    list of dict
        One record per size: times per call in µs (``t_us_median``, ...), ``size_bytes``,
        ``impl``, ``op``, ``alg``, ``ranks``, ``simulated`` (False), ``measured`` (True),
        ``oversubscribed`` and ``checked``.

    Raises
    ------
    ValueError
        An unknown `op` or algorithm.
    mpilab.jobs.JobFailed, mpilab.jobs.JobTimeout
        The MPI job failed or ran past `timeout`.
    """
    from .. import kernels

    validate.names(op, tuple(OUR_ALGORITHMS), "op")
    code = _alg_code(op, alg)
    dtype = _DTYPE.get(op, "uint8")
    esz = 8 if dtype == "float64" else 1
    sizes = [validate.count(n, "size", 0) for n in sizes]
    launch = runtime.launch(validate.count(ranks, "ranks"))
    args = [op, code, dtype, 0, 5, reps, 1,
            *(f"{n // esz}:{max(10, min(1000, (1 << 22) // max(n * ranks, 1)))}"
              for n in sizes)]
    res = jobs.run(launch, [str(kernels.program("mpilab-coll")), *map(str, args)],
                   timeout=timeout)
    out = []
    for o in (json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")):
        rec = timing.record(o["times"], size_bytes=o["size_bytes"], iters=o["iters"],
                            impl="library" if alg == "library" else f"mpilab:{alg}")
        rec.update(op=op, alg=alg, ranks=ranks, simulated=False, measured=True,
                   oversubscribed=launch.oversubscribed, checked=o["checked"])
        out.append(rec)
    return out


def check_collective(op: str = "allgather", algs: Sequence[str] = ("ring", "bruck"),
                     sizes: Sequence[int] = (64, 65536), *, ranks: Sequence[int] = (2, 3, 4),
                     recalibrate: bool = False) -> list[dict]:
    """Measured vs simulated collectives on this machine at 2-4 ranks, with the error.

    The check to make before believing a scale-out: the same C program on the same
    sizes, measured here and simulated on the calibrated ``this-machine`` platform.
    Runs with more ranks than cores are flagged (``oversubscribed``): there the real
    ranks share cores, which the platform (one core per rank) does not model.
    Rows: op, alg, ranks, size_bytes, measured_us, simulated_us, error, oversubscribed.

    Parameters
    ----------
    op : str, optional
        The operation (default ``"allgather"``).
    algs : sequence of str, optional
        Our algorithms to compare (default ring and Bruck); an algorithm that does not
        admit a rank count is skipped there.
    sizes : sequence of int, optional
        Bytes per rank (default 64 B and 64 KiB).
    ranks : sequence of int, optional
        Rank counts (default 2, 3 and 4).
    recalibrate : bool, optional
        Calibrate ``this-machine`` again first (default False: only if it is missing).

    Returns
    -------
    list of dict
        One row per rank count, algorithm and size: ``op``, ``alg``, ``ranks``,
        ``size_bytes``, ``measured_us`` and ``simulated_us`` (median µs per call),
        ``error`` (simulated / measured - 1), ``oversubscribed`` and ``label``.
    """
    if recalibrate or not _this_machine_path().exists():
        calibrate()
    rows = []
    for p in ranks:
        for alg in algs:
            if _collectives.ALGORITHMS[op][alg].admissible(p) is not None:
                continue
            meas = {r["size_bytes"]: r for r in measure_collective(op, alg, sizes, ranks=p)}
            simd = {r["size_bytes"]: r for r in collective(op, [alg], sizes, ranks=p,
                                                           platform="this-machine")}
            for n in sizes:
                m, s_ = meas[n]["t_us_median"], simd[n]["t_us_median"]
                rows.append({"op": op, "alg": alg, "ranks": p, "size_bytes": n,
                             "measured_us": m, "simulated_us": s_, "error": s_ / m - 1.0,
                             "oversubscribed": meas[n]["oversubscribed"],
                             "label": label("this-machine")})
    return rows
