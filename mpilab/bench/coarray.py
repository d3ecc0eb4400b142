"""Coarray Fortran vs MPI: the coarray paper's K1 and K2 by subdomain size (its Table 1).

    python -m mpilab.bench coarray --sub 16,64,256,1024 --ranks 4 --json OUT

For each subdomain edge N in `--sub`, every process owns N x N cells of the acoustic wave
(global grid ``N * px`` x ``N * py`` on the ``MPI_Dims_create`` process grid) and the
Fortran programs of ``kernels/caf`` (:mod:`mpilab.coarrays`) time steps in every mode:
``blocking`` and ``nonblocking`` (Fortran + MPI), ``coarray`` (puts into the neighbours'
ghost cells, ``sync all``), ``coarray-images`` (the same with ``sync images``) and
``coarray-packed`` (``sync all``, columns packed into contiguous buffers), one launch per
mode, alternating in `--rounds` rounds so their ratios see the same load. The
first round's launches first run ``check_steps`` steps from rest, and each mode's field
is compared bit for bit with the NumPy serial reference (``valid``). Records carry mode,
sub, ranks, nx, ny, dims, t_us_min, t_us_median (per step), quartiles, iters, valid and
oversubscribed; meta says which machine, MPI, compilers and launcher. The table gives
K1 = T_blocking / T_nonblocking and K2 = T_blocking / T_coarray (and the same ratio for the
two other coarray modes) from the medians and from the best repetitions.
"""

from __future__ import annotations

import subprocess
import sys

from .. import coarrays, runtime, validate
from ..halo.k1 import k_row
from ..timing import run_meta
from . import TIMEOUT, finish, parser, sub_sizes

CHECK_STEPS = 20


def _library(records: list[dict]) -> dict:
    """The library facts of :func:`mpilab.runtime.library_info`, from the ranks' line."""
    first = next((r["mpi_library_version"] for r in records if r.get("mpi_library_version")),
                 "unknown")
    low = first.lower()
    family = "openmpi" if "open mpi" in low else "mpich" if "mpich" in low else "other"
    version = ""
    if family == "openmpi":
        version = first.split(",")[0].replace("Open MPI", "").strip().lstrip("v")
    return {"mpi_library": family, "mpi_version": version, "mpi_library_version": first}


def _compilers() -> dict:
    out = {}
    for key, cmd in (("gfortran", ["gfortran", "--version"]), ("caf", ["caf", "--version"]),
                     ("cafrun", ["cafrun", "--version"])):
        try:
            text = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
            out[key] = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        except (OSError, subprocess.TimeoutExpired):
            out[key] = "unknown"
    out["fflags"] = " ".join(coarrays.FFLAGS)
    out["caf_one_sided"] = ("OpenCoarrays puts are MPI one-sided operations; Open MPI's "
                            "default osc component, pt2pt for a single image")
    return out


def run(subs, *, modes=coarrays.MODES, ranks=2, dims=None, transport="shm", reps=10,
        rounds=3, min_time=0.005, check_max=1 << 22,
        timeout=TIMEOUT) -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records). `dims` (py, px) defaults to MPI_Dims_create's."""
    modes = validate.names(modes, coarrays.MODES, "mode")
    for name, v in (("ranks", ranks), ("reps", reps), ("rounds", rounds)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not subs or any(not isinstance(s, int) or s < 1 for s in subs):
        raise ValueError(f"sub sizes must be integers >= 1, got {subs!r}")
    ok, why = coarrays.available()
    if not ok:
        raise coarrays.CoarraysUnavailable(why)
    coarrays.build()
    launch = runtime.launch(ranks, transport)
    records = []
    for sub in subs:
        records += coarrays.time_wave(modes, sub, ranks=ranks, dims=dims, reps=reps,
                                      rounds=rounds,
                                      min_time=min_time, transport=transport,
                                      check_steps=CHECK_STEPS, check_max=check_max,
                                      timeout=timeout)
    settings = {"modes": modes, "subs": list(subs), "reps": reps, "rounds": rounds,
                "min_time": min_time, "check_steps": CHECK_STEPS, "check_max": check_max,
                "timeout": timeout, **_compilers()}
    m = run_meta(launch, settings, _library(records))
    m["dims"] = list(records[0]["dims"])
    return m, records


def table(records: list[dict]) -> str:
    """Time per step by subdomain and mode (medians), K1 and K2 (medians, then minima)."""
    modes = [m for m in coarrays.MODES if any(r["mode"] == m for r in records)]
    by = {(r["mode"], r["sub"]): r for r in records}
    ks = [(name, m) for name, m in (("K1", "nonblocking"), ("K2", "coarray"),
                                    ("K2 img", "coarray-images"),
                                    ("K2 pack", "coarray-packed")) if m in modes]
    if "blocking" not in modes:
        ks = []
    ranks = records[0]["ranks"] if records else "?"
    lines = [f"# wave (Fortran), {ranks} processes, time per step (median, us); "
             "K1 = T_blocking / T_nonblocking, K2 = T_blocking / T_coarray",
             f"{'sub':>8} " + " ".join(f"{'T_' + m:>17}" for m in modes)
             + "".join(f" {name:>7} {'(min)':>6}" for name, _ in ks)]
    lines += [k_row(by, sub, modes, [m for _, m in ks], widths=(8, 17, 7))
              for sub in sorted({r["sub"] for r in records})]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("coarray", __doc__, reps=10, rounds=3, min_time=0.005)
    p.add_argument("--mode", default="all",
                   help="comma-separated modes among " + ", ".join(coarrays.MODES)
                        + ", or all")
    p.add_argument("--sub", default="16,64,256,1024",
                   help="subdomain edges N (N x N cells per process), comma-separated")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--dims", metavar="PYxPX",
                   help="process grid, rows x columns (default: as MPI_Dims_create; 1x2 "
                        "makes 2 processes exchange columns)")
    p.add_argument("--check-max", type=int, default=1 << 22,
                   help="largest global grid (cells) checked against the full NumPy "
                        "reference; larger ones against a window around the source")
    a = p.parse_args(argv)

    def measure():
        subs = sub_sizes(a.sub)
        dims = None
        if a.dims:
            try:
                dims = tuple(int(v) for v in a.dims.lower().split("x"))
            except ValueError:
                raise ValueError(f"--dims takes PYxPX, e.g. 1x2, got {a.dims!r}") from None
        return run(subs, modes=a.mode, ranks=a.ranks, dims=dims, transport=a.transport,
                   reps=a.reps, rounds=a.rounds, min_time=a.min_time, check_max=a.check_max,
                   timeout=a.timeout)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | {a.ranks} processes "
                f"(grid {m['dims'][0]} x {m['dims'][1]}) on {m['cores']} cores"
                + (" (oversubscribed)" if m.get("oversubscribed") else "") + "\n"
                + table(recs))

    return finish("coarray", a.json, measure, show,
                  ok=lambda recs: all(r.get("valid") for r in recs))


if __name__ == "__main__":
    sys.exit(main())
