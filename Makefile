# The two commands of the README:  make learn  (the course, exercises open)  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Multi30k from a folder of its .gz files: make learn DATA=/media/usb/multi30k, else $TRANSFORMER_LESSONS_DATA of your
# shell, else the shared copy beside the project when there is one (tests, CI). Empty: the package's own cache, which in
# a course folder prepared by `make classroom` is its classroom/cache (no network needed).
DATA   ?= $(or $(TRANSFORMER_LESSONS_DATA),$(abspath $(wildcard ../shared/data/multi30k)))
# For JupyterLab: the variable only when DATA is set, so an empty DATA never hides the shell's own.
DATA_ENV = $(if $(DATA),TRANSFORMER_LESSONS_DATA="$(DATA)")
# A course folder prepared with `make classroom WHEELS=yes` carries every Python package in classroom/wheels: pip then
# installs from there alone, so a learner's machine needs no network for `make learn` either.
ifneq ($(wildcard classroom/wheels/*.whl),)
export PIP_NO_INDEX := 1
export PIP_FIND_LINKS := $(abspath classroom/wheels)
endif

.PHONY: learn lab test unit notebooks setup format bench clean execute learner learner-test browser-test ci classroom offline-test lock colab-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installed once, again whenever pyproject.toml or the lock changes: every package at its version of
# requirements/lock.txt (pip constraints: what the notebooks were executed with; `make lock` writes it), with the
# package's lab (JupyterLab) and test extras. torch is pinned first, on its own (the lock's version),
# so that nothing else can pull a newer release. On Linux, PyPI's torch is the CUDA build
# with its NVIDIA libraries (gigabytes); on a machine without an NVIDIA GPU,
#   make learn TORCH_INDEX=https://download.pytorch.org/whl/cpu
# installs PyTorch's CPU-only build of the same version instead.
TORCH_INDEX ?=
$(VENV)/.installed: pyproject.toml requirements/lock.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -c requirements/lock.txt -e ".[lab,test]"
	touch $@

# The course's JupyterLab settings (jupyter/lab-settings.json), installed into the venv as defaults that the
# learner can still change in JupyterLab: no "get notified about official Jupyter news?" box over a new learner's
# notebook, no update check (a classroom often has no network). JupyterLab reads every file in
# <venv>/share/jupyter/lab/settings/overrides.d/ (jupyterlab_server's settings_utils).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/transformer-lessons.json
$(LAB_SETTINGS): jupyter/lab-settings.json | $(VENV)/.installed
	mkdir -p $(dir $@)
	cp $< $@

setup: $(VENV)/.installed $(LAB_SETTINGS)

# JupyterLab on the lessons: learn opens learner/ (the exercises, for you to write), lab opens notebooks/
# (the same lessons solved). ARGS goes to jupyter lab as it is, for example
#   make learn ARGS="--no-browser --port 8890"
#   make learn ARGS="--IdentityProvider.token=choose-a-secret"
# (`.venv/bin/jupyter lab --help` lists the options). `:=` so that an ARGS variable of your shell is not
# picked up by accident; only `make learn ARGS=...` sets it.
ARGS :=

# Both run `python -m transformer_lessons lab` (transformer_lessons/lab_launch.py), the command a machine without
# make runs too: JupyterLab rooted at this folder (learner/ and notebooks/ both reachable), kernels over local sockets
# on Linux and macOS, and --allow-root for root (a Docker container, many workshop VMs), with a line saying so.
learn: setup
	$(DATA_ENV) $(BIN)/python -m transformer_lessons lab $(ARGS)

lab: setup
	$(DATA_ENV) $(BIN)/python -m transformer_lessons lab --solutions $(ARGS)

# Every test: the code's format and lint (ruff), unit tests, then every notebook executed by nbval in quick mode.
# TQDM_MININTERVAL: progress bars refresh at most every 5 s, so a long bar cannot flood
# the kernel messages nbval reads.
test: setup
	$(BIN)/python -m ruff format --check $(CODE)
	$(BIN)/python -m ruff check $(CODE)
	TQDM_MININTERVAL=5 TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		$(BIN)/python -m pytest tests --nbval notebooks/ -m "not learner_exec" --ignore=tests/browser -p no:cacheprovider

unit: setup
	TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" $(BIN)/python -m pytest tests -m "not learner_exec" --ignore=tests/browser -p no:cacheprovider

notebooks: setup
	TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		$(BIN)/python -m pytest --nbval notebooks/ -p no:cacheprovider

# The code in ruff's one format, and its lint (pyproject.toml's [tool.ruff]); make test checks both first.
CODE := transformer_lessons tests scripts benchmarks images
format: setup
	$(BIN)/python -m ruff format $(CODE)
	$(BIN)/python -m ruff check --fix $(CODE)

bench: setup
	$(BIN)/python benchmarks/bench_model.py
	TRANSFORMER_LESSONS_DATA="$(DATA)" $(BIN)/python benchmarks/bench_train.py
	TRANSFORMER_LESSONS_DATA="$(DATA)" $(BIN)/python benchmarks/bench_decode.py

# Re-run every notebook in place in the quick mode and save its outputs (after changing a lesson or the
# package), timing each (the table it prints, and results/notebook_times.json, are the notebooks' run times
# on this machine), starting without the runs the notebooks train, as a fresh checkout does (they go to the top-level
# runs/; NOTEBOOK_RUNS names them, and any other run there is kept; notebooks/runs is where they went before).
# The Colab cells are stamped first, so that the saved notebooks hold their executed versions; learner/ is
# rebuilt from the result. The checks record their verdicts in a progress file of this run's own (not the
# author's), so the saved progress() table of notebook 00 shows what a new learner sees.
NOTEBOOK_RUNS := runs/quick runs/quick_scheduled_sampling runs/09_resume_demo
execute: setup
	$(BIN)/python -m transformer_lessons.authoring.colab
	rm -rf notebooks/runs $(NOTEBOOK_RUNS)
	TQDM_MININTERVAL=5 TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		TRANSFORMER_LESSONS_PROGRESS="$$(mktemp -d)/progress.json" \
		$(BIN)/python scripts/time_notebooks.py --inplace --json results/notebook_times.json
	$(MAKE) learner

# Learner notebooks (exercises as stubs, solutions folded) and the Colab cells, generated from notebooks/.
learner: setup
	$(BIN)/python -m transformer_lessons.authoring.course_counts
	$(BIN)/python -m transformer_lessons.authoring.colab
	$(BIN)/python -m transformer_lessons.authoring.build_learner

# learner/ and the Colab cells are up to date; every learner notebook runs with its exercises open.
learner-test: setup
	$(BIN)/python -m transformer_lessons.authoring.colab --check
	$(BIN)/python -m transformer_lessons.authoring.build_learner --check
	TQDM_MININTERVAL=5 TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		$(BIN)/python -m pytest tests/test_learner_build.py -m learner_exec -p no:cacheprovider

# The attention explorer and the folded solutions in JupyterLab + headless Chromium (installs Chromium and
# Playwright). TRANSFORMER_LESSONS_REQUIRE_BROWSER=1: if either is still missing the tests fail, never skip.
browser-test: setup
	bash scripts/browser_setup.sh $(BIN)/python
	TRANSFORMER_LESSONS_REQUIRE_BROWSER=1 TRANSFORMER_LESSONS_MODE=quick $(BIN)/python -m pytest tests/browser -p no:cacheprovider

# A classroom without network (docs/teaching.md, "A room without network"): this course folder made self-sufficient.
# Multi30k checked into classroom/cache (copied from DATA when set, e.g. DATA=/media/usb/multi30k, else downloaded),
# its tokens, the course's model checked, the quick model trained into runs/. WHEELS=yes also keeps every Python
# package of .venv in classroom/wheels (TORCH_INDEX: where PyTorch comes from), from which `make learn` installs.
# Copy the folder to the learners' machines; `.venv/bin/python -m transformer_lessons classroom --check` on one says
# whether it is ready.
WHEELS :=
classroom: setup
	$(BIN)/python -m transformer_lessons classroom $(if $(DATA),--from "$(DATA)") \
		$(if $(WHEELS),--wheels $(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX)))

# Every notebook in the quick mode with the network off, on this folder as `make classroom` leaves it (prepared
# first, from DATA when set: CI's shared copy). scripts/offline.sh runs nbval in a network namespace with only the
# loopback; TRANSFORMER_LESSONS_DATA and _CACHE are unset and HOME is empty (no ~/.cache): everything the notebooks
# use must come from the folder itself.
offline-test: setup
	$(BIN)/python -m transformer_lessons classroom $(if $(DATA),--from "$(DATA)") --quiet
	home=$$(mktemp -d) && trap 'rm -rf "$$home"' EXIT && \
	bash scripts/offline.sh env -u TRANSFORMER_LESSONS_DATA -u TRANSFORMER_LESSONS_CACHE HOME="$$home" \
		TQDM_MININTERVAL=5 TRANSFORMER_LESSONS_MODE=quick MPLBACKEND=agg sh -c \
		'$(BIN)/python -m transformer_lessons classroom --check && $(BIN)/python -m pytest --nbval notebooks/ -p no:cacheprovider'

# requirements/lock.txt again, from what .venv has (scripts/lock.py; LOCK_ARGS=--fresh: the newest releases within
# pyproject.toml's ranges, then make setup and make execute).
LOCK_ARGS :=
lock: setup
	$(BIN)/python scripts/lock.py $(LOCK_ARGS)

# The course with Google Colab's versions (requirements/colab.txt, from Colab's published pip freeze;
# scripts/colab_constraints.py updates it): a venv of its own (.venv-colab) on Python 3.11 with the pinned CPU torch,
# the notebooks' Colab cell run as on Colab, the unit tests but the pin checks, notebooks 01-07 and 11 executed,
# every explorer's widget and static picture there (scripts/colab_test.py). CPU torch: TORCH_INDEX as for setup.
COLAB_PYTHON ?= python3.11
colab-test:
	$(COLAB_PYTHON) scripts/colab_test.py --python $(COLAB_PYTHON) --data "$(DATA)" $(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX))

# What CI runs: every test, the learner versions, the browser test, and the notebooks offline; the course with Colab's versions.
ci: test learner-test browser-test offline-test colab-test

clean:
	rm -rf $(VENV) .pytest_cache
