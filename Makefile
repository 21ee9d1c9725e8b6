# The two commands of the README:  make lab  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Tests and CI read Multi30k from the shared copy beside the project when there is one.
DATA   ?= $(abspath $(wildcard ../shared/data/multi30k))

.PHONY: lab test unit notebooks setup bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installed once, again whenever pyproject.toml changes. torch is pinned first,
# on its own, so a fresh venv never pulls a newer release with GBs of extras.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e .
	touch $@

setup: $(VENV)/.installed

lab: setup
	$(BIN)/jupyter lab notebooks/

# Every test: unit tests, then every notebook executed by nbval in quick mode.
test: setup
	TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		$(BIN)/python -m pytest tests --nbval notebooks/ -p no:cacheprovider

unit: setup
	TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" $(BIN)/python -m pytest tests -p no:cacheprovider

notebooks: setup
	TRANSFORMER_LESSONS_MODE=quick TRANSFORMER_LESSONS_DATA="$(DATA)" MPLBACKEND=agg \
		$(BIN)/python -m pytest --nbval notebooks/ -p no:cacheprovider

bench: setup
	$(BIN)/python benchmarks/bench_model.py

clean:
	rm -rf $(VENV) .pytest_cache
