# Two commands do all set-up on a fresh clone: `make run` and `make test` (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make run` installs what the app needs; the test and tool targets add the dev extras.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
LLM := $(VENV)/.installed-llm

.PHONY: run test test-fast test-llm bench lint format install clean

# `make run PORT=8001` serves on 8001; `serve` also reads PORT from the environment.
run: $(RUNTIME)
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py serve $(if $(PORT),--port $(PORT))

AXE := tests/browser/node_modules/axe-core/axe.min.js

# Test processes side by side (pytest-xdist); each has its own database and Redis. Most tests
# of the PostgreSQL run wait on real clocks (heartbeats, backoffs, replies written at a set pace):
# with two processes half of the two cores stayed idle, and three finish it in two thirds of the
# time. The browser tests keep the cores busy with Chromium: a third process gains little there.
TEST_WORKERS ?= 3
BROWSER_WORKERS ?= 2
# The llama.cpp lane is `make test-llm`'s.
SUITE := --ignore=tests/llm

# The suite on PostgreSQL (what disturbs tests beside it, marked `exclusive`, alone after the
# rest); again on SQLite (`make run`'s database), all but what is marked PostgreSQL-only; the
# browser tests; the multi-host tests, on a network of namespaces they build (root only; they
# skip elsewhere). See README "Two commands".
test: $(DEV) $(AXE)
	scripts/ensure-test-services
	$(MAKE) lint
	rm -rf test-artifacts
	$(BIN)/python -m pytest $(SUITE) -n $(TEST_WORKERS) -m "not exclusive" --durations=25 \
		$(PYTEST_ARGS)
	$(BIN)/python -m pytest $(SUITE) -m exclusive $(PYTEST_ARGS)
	DATABASE_URL=sqlite://:memory: $(BIN)/python -m pytest $(SUITE) -n $(TEST_WORKERS) \
		-m "not postgresql" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -n $(BROWSER_WORKERS) tests/browser $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests/hosts --ds tests.hosts.settings $(PYTEST_ARGS)

# The tests that start no process (no worker, daphne, server or command), on PostgreSQL: about a
# minute and a half, for the edit-test loop. A test that starts one fails here: mark it `processes`.
test-fast: $(DEV)
	scripts/ensure-test-services
	CONTINUITY_FAST_LANE=1 $(BIN)/python -m pytest $(SUITE) -n $(TEST_WORKERS) \
		-m "not processes and not exclusive" $(PYTEST_ARGS)

# The openai brain against llama.cpp's server with a tiny model the tests write
# (docs/model-backends.md). Its first install compiles llama.cpp: about 4 minutes on 2 cores,
# then kept in .venv (and pip's wheel cache). CI runs it after `make test`.
test-llm: $(LLM)
	scripts/ensure-test-services
	$(BIN)/python -m pytest tests/llm $(PYTEST_ARGS)

# Measures the engine and writes docs/benchmarks.md (docs/testing.md, "Benchmarks"); not part of
# `make test`, which makes only a smoke run of it. `make bench BENCH_ARGS="--only latency"` runs one section.
bench: $(DEV)
	scripts/ensure-test-services
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/continuity} \
		$(BIN)/python manage.py bench $(BENCH_ARGS)

# The import contracts are pyproject.toml's [tool.importlinter]: the layers, no devtools or tests
# in the product, and where hand-written SQL may be imported.
lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# No cache: a cached graph once hid a broken contract here that a fresh clone found.
	PYTHONPATH=. $(BIN)/lint-imports --no-cache

format: $(DEV)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

install: $(DEV)

$(RUNTIME): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(DEV)

$(LLM): $(DEV)
	$(BIN)/python -m pip install --quiet -e '.[dev,llm]'
	touch $(LLM)

# axe-core, the accessibility checker the browser tests run on each page, from the npm registry.
$(AXE): tests/browser/package.json tests/browser/package-lock.json
	npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
	touch $(AXE)

clean:
	rm -rf $(VENV) var tests/browser/node_modules
