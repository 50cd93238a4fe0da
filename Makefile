# The two commands of README.rst's Quick start.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: venv demo simulate test bench

$(BIN)/mesoslike: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/mesoslike

demo: venv
	$(BIN)/mesoslike local --port 0 --http-port 0 -- $(BIN)/python examples/wordcount.py

simulate: venv
	$(BIN)/mesoslike simulate

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/allocator.py
