# blobdex: make install | run | test | bench. The venv lives in .venv; the CLI is .venv/bin/blobdex.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch, pinned. PyPI's Linux wheel of it brings several GB of CUDA libraries (this project's CI registry serves a
# CPU wheel); for the CPU-only build: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
# On a GPU machine: make install TORCH=torch   (or any pip requirement, e.g. torch==2.13.0+cu128)
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
SAMPLE_QUERY ?= publish a new snapshot atomically
PORT ?= 8765

.PHONY: install run lint test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: install
	test -f blobdex.toml || $(BIN)/blobdex init
	$(BIN)/blobdex index
	$(BIN)/blobdex search "$(SAMPLE_QUERY)" -n 3
	$(BIN)/blobdex serve --port $(PORT)

lint: install
	$(BIN)/ruff check indexer query tests ci
	$(BIN)/ruff format --check indexer query tests ci

test: install lint
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python ci/bench.py

clean:
	rm -rf $(VENV) .blobdex *.egg-info
