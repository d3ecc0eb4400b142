"""Build the mpilab kernels with the MPI compiler wrapper.

Each kernel lives in kernels/<name>/ (C source, header, .pxd mirroring the header, thin
.pyx) and becomes the extension module mpilab.kernels.<name>. The ping-pong loop is also
built as a standalone MPI program, mpilab/kernels/_bin/mpilab-pingpong, the reference
the Cython kernel is benchmarked against.

What an installed mpilab needs besides its modules travels inside the package, so that a
non-editable install (`pip install .`, a wheel) works from any directory:

    mpilab/_kernel_src/<folder>/   kernels/<folder>/ as it is in the repository (C,
                                   headers, Cython, Fortran): the SimGrid and coarray
                                   programs and a notebook's Cython are built from it at
                                   run time (mpilab.kernels.source_dir() finds it);
    mpilab/kernels/_bin/           the standalone MPI programs, built by build_ext below;
    mpilab/kernels/*.pyi           the kernels' type stubs;
    mpilab/platforms/*.xml         the simulated machines (SimGrid).

The sources are not copied: package_dir maps the data-only packages
mpilab._kernel_src.<folder> onto kernels/<folder>, so the sdist carries kernels/ where this
file compiles from and the wheel carries it under mpilab/_kernel_src/. A checkout (an
editable install, or `make kernels`, i.e. build_ext --inplace) has no mpilab/_kernel_src
and uses kernels/ itself.
"""

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent.resolve()
# the runtime package, read from its files without importing mpilab (its modules import
# one another only)
spec = importlib.util.spec_from_file_location(
    "_runtime", HERE / "mpilab" / "runtime" / "__init__.py",
    submodule_search_locations=[str(HERE / "mpilab" / "runtime")])
runtime = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = runtime  # its submodules (and dataclasses) look it up there
spec.loader.exec_module(runtime)

MPICC = runtime.mpicc()
# -ffp-contract=off: no multiply-add fused into an FMA, so the kernels' fields keep NumPy's
# bits on CPUs with FMA (kernels/common/mpilab_halo.h)
CFLAGS = ["-O3", "-std=gnu11", "-Wall", "-Wno-unused-function", "-ffp-contract=off"]
os.environ["CC"] = MPICC
os.environ["LDSHARED"] = f"{MPICC} -shared"

# the one list of kernels lives in the package (mpilab/kernels/__init__.py), read from the
# file as the runtime package is, before anything is built; a kernel whose folder is
# absent is skipped
_spec = importlib.util.spec_from_file_location("_kernels", HERE / "mpilab" / "kernels" /
                                               "__init__.py")
_kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_kernels)
KERNELS, STANDALONE = _kernels.KERNELS, _kernels.STANDALONE
# MPILAB_KERNELS=stencil,wave builds only those (to work on one kernel at a time); =none
# builds none (scripts/setup.sh's editable install: `make kernels` builds them after it).
_ONLY = {k.strip() for k in os.environ.get("MPILAB_KERNELS", "").split(",") if k.strip()}


def selected(name: str) -> bool:
    return (not _ONLY or name in _ONLY) and (HERE / "kernels" / name / f"{name}.pyx").exists()


def extensions():
    import mpi4py
    from Cython.Build import cythonize

    exts = []
    for name, csrc in KERNELS.items():
        if not selected(name):
            continue
        folder = Path("kernels") / name
        exts.append(
            Extension(
                f"mpilab.kernels.{name}",
                [str(folder / f"{name}.pyx"), *(str(folder / c) for c in csrc)],
                include_dirs=[str(folder), "kernels/common", mpi4py.get_include()],
                extra_compile_args=CFLAGS,
                # a change to a header alone must rebuild the kernel too
                depends=sorted(str(h) for h in [*folder.glob("*.h"),
                                                *Path("kernels/common").glob("*.h")]),
            )
        )
    return cythonize(
        exts,
        include_path=["kernels/common", *(f"kernels/{k}" for k in KERNELS if selected(k)),
                      mpi4py.get_include()],
        compiler_directives={"language_level": 3},
        build_dir="build/cython",  # generated C must not overwrite the kernels' own .c
        quiet=True,
        nthreads=max(1, len(os.sched_getaffinity(0))),
    )


class BuildWithPrograms(build_ext):
    """build_ext, then the standalone MPI programs next to the extensions.

    The extensions compile in parallel, one per core, unless ``-j`` says otherwise: the
    kernels are half of a fresh install's time (48 s on one of 2 cores, 27 s on both).
    """

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = max(1, len(os.sched_getaffinity(0)))

    def run(self):
        super().run()
        base = HERE if self.inplace else Path(self.build_lib)
        bindir = base / "mpilab" / "kernels" / "_bin"
        bindir.mkdir(parents=True, exist_ok=True)
        for prog, srcs in STANDALONE.items():
            if not selected(srcs[0].split("/")[0]):
                continue
            cmd = [
                *shlex.split(MPICC), *CFLAGS, "-Ikernels/common",
                *(f"-Ikernels/{Path(s).parent}" for s in srcs),
                *(f"kernels/{s}" for s in srcs), "-o", str(bindir / prog), "-lm",
            ]
            self.announce(" ".join(cmd), level=2)
            subprocess.run(cmd, check=True, cwd=HERE)


PACKAGES = ["mpilab", "mpilab.kernels", "mpilab.bench", "mpilab.grading", "mpilab.autograder",
            "mpilab.runtime", "mpilab.cluster", "mpilab.sim", "mpilab.halo", "mpilab.tuning",
            "mpilab.tracing", "mpilab.netlab", "mpilab.collectives", "mpilab.pingpong",
            "mpilab.plots", "mpilab.models", "mpilab.platforms"]  # the last holds data only
KERNEL_SOURCES = ["*.c", "*.h", "*.pyx", "*.pxd", "*.pxi", "*.f90"]
SOURCE_FOLDERS = sorted(p.name for p in (HERE / "kernels").iterdir()
                        if p.is_dir() and any(next(p.glob(g), None) for g in KERNEL_SOURCES))

setup(
    packages=[*PACKAGES, *(f"mpilab._kernel_src.{f}" for f in SOURCE_FOLDERS)],
    package_dir={"mpilab._kernel_src": "kernels"},
    package_data={
        "mpilab": ["py.typed", "papers.json"],
        "mpilab.kernels": ["*.pyi"],
        "mpilab.platforms": ["*.xml"],
        **{f"mpilab._kernel_src.{f}": KERNEL_SOURCES for f in SOURCE_FOLDERS},
    },
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildWithPrograms},
)
