# mpilab — one target per job. `make lab` and `make test` set everything up first.
SHELL := /bin/bash
export MPILAB_MPI ?= openmpi
PY := $(if $(and $(CONDA_PREFIX),$(wildcard $(CONDA_PREFIX)/bin/mpicc)),$(CONDA_PREFIX)/bin/python,.venv/bin/python)
JUPYTER_ARGS := --no-browser --ip 127.0.0.1 --ServerApp.root_dir=$(CURDIR) $(if $(filter 0,$(shell id -u)),--allow-root,)
KERNEL_SRC := $(wildcard kernels/*/*.c kernels/*/*.h kernels/*/*.pyx kernels/*/*.pxd kernels/*/*.f90 kernels/common/*) setup.py \
              mpilab/kernels/__init__.py
KERNEL_OUT := mpilab/kernels/_bin/mpilab-pingpong
# written by scripts/setup.sh; changes with the selected MPI, so the kernels are rebuilt
SETUP_STAMP := $(wildcard $(dir $(PY))../.mpilab-setup)

.PHONY: setup setup-test kernels lab test test-fast test-latest lock lint clean help \
        lab-generate lab-release lab-autograde lab-feedback

help:
	@echo "make lab        set up (MPI, .venv, kernels) and start JupyterLab on the course"
	@echo "make test       set up and run the whole test suite"
	@echo "make test-fast  tests without notebooks, nbgrader runs and the browser"
	@echo "make test-latest  the tests on the newest releases, in a copy (.latest/); says what changed"
	@echo "make lock       record the test environment's versions in constraints.txt"
	@echo "make kernels    (re)build the compiled kernels"
	@echo "make lint       ruff, cython-lint, codespell, notebook cleanliness"
	@echo "make lab-generate|lab-release|lab-autograde|lab-feedback  nbgrader (see autograder/)"
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

lab: setup
	$(PY) -m jupyter lab $(JUPYTER_ARGS) --ServerApp.default_url=/lab/tree/lectures/00-mpi-in-a-notebook.md

test: setup-test
	$(PY) -m pytest -v --durations=40

test-fast: setup-test
	$(PY) -m pytest -v -m "not slow and not browser"

# The newest releases of every dependency, in a copy of the tree with its own .venv
# (scripts/test-latest.sh): upstream drift is seen here before a class meets it.
# PYTEST_ARGS='-q -m "not slow"' runs a part.
PYTEST_ARGS ?=
test-latest:
	scripts/test-latest.sh $(PYTEST_ARGS)

# constraints.txt <- the versions in the test environment (after a green `make test`).
lock: setup-test
	{ grep '^#' constraints.txt; $(PY) -m pip freeze --all --exclude-editable \
	  | grep -v '^mpilab'; } > constraints.txt.new && mv constraints.txt.new constraints.txt

lint: setup-test
	$(PY) -m ruff check mpilab tests setup.py lectures
	PATH=$(dir $(PY)):$$PATH cython-lint --max-line-length 100 kernels
	PATH=$(dir $(PY)):$$PATH codespell mpilab kernels lectures tests README.md autograder
	$(PY) -m nbstripout --verify labs/*/*.ipynb autograder/*.ipynb

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
lab-autograde: setup
	$(NBG) autograde "$(LAB)" $(NBFLAGS)
lab-feedback: setup
	$(NBG) generate_feedback "$(LAB)" --force $(NBFLAGS)
	@if [ -n "$(EXCHANGE)" ]; then \
	  for l in $(LAB_IDS); do ($(NBG) release_feedback $$l $(NBG_EXCHANGE)) || exit 1; done; fi

clean:
	rm -rf build mpilab/kernels/*.so mpilab/kernels/_bin autograder/release \
	       autograder/autograded autograder/feedback
