# The two commands of the README, and what they need. Works on a fresh machine with Python 3.11+
# and Java 11+ (the emulators); everything else is installed into .venv.
PYTHON ?= python3
VENV ?= .venv
# The tests run in this many processes (pytest-xdist), a file's tests together in one, in the
# order they are collected: TEST_PROCESSES=1 runs them in this process, one after another.
TEST_PROCESSES ?= 2
PARALLEL = $(if $(filter 1,$(TEST_PROCESSES)),,-n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder)
Q ?= are there any weather alerts where I am?

.DEFAULT_GOAL := help
.PHONY: help install install-test dist ask test test-quick lint docs checkov clean

# One line per target: the text after `## ` on its line.
help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)$$/  make \1\t\2/' | expand -t 24

# What `make ask` needs: the runtime and the development tools (the local stack's sandbox and
# fake Gemini server), without the benchmark's Temporal peer and chart.
install: $(VENV)/.installed  ## the runtime, the development tools and pytest, into .venv

$(VENV)/.installed: pyproject.toml devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[testing]' -e ./devtools
	touch $@

# What the tests and the linters need on top: pytest, ruff, mypy, the deployment checks, the MCP
# SDK and the benchmark's extras (tests/bench runs the Temporal side).
install-test: $(VENV)/.installed-test  ## adds the tests', linters' and site's extras

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/pip install -q -e '.[dev,infra,mcp,eval,docs]' -e './devtools[bench]'
	touch $@

# ackloop and ackloop-dev are not on the package index yet: their wheels, to install elsewhere
# (pip install --find-links dist ackloop-dev, or `ackloop new --from dist`).
dist: $(VENV)/bin/pip  ## the wheels of ackloop and ackloop-dev, into dist/
	rm -f dist/ackloop-*.whl dist/ackloop_dev-*.whl
	$(VENV)/bin/pip wheel -q --no-deps --wheel-dir dist . ./devtools
	@ls dist/ackloop-*.whl dist/ackloop_dev-*.whl

$(VENV)/bin/pip:
	$(PYTHON) -m venv $(VENV)

# checkov pins packages that clash with ours: it lives in its own virtualenv.
checkov: .venv-checkov/bin/checkov  ## checkov, in a virtualenv of its own

.venv-checkov/bin/checkov:
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q checkov==3.3.30

# Ask the agent a question end to end: emulators, functions, the question, the answer.
ask: install  ## ask Q="..." end to end on the emulators
	$(VENV)/bin/ackloop dev down >/dev/null 2>&1 || true
	$(VENV)/bin/ackloop dev up
	$(VENV)/bin/ackloop ask "$(Q)"; status=$$?; $(VENV)/bin/ackloop dev down; exit $$status

# Every test tier: unit, contract (memory + Firestore emulator), end to end, infra checks.
test: install-test checkov  ## every test tier
	$(VENV)/bin/python -m pytest -q -ra --durations=25 $(PARALLEL)

# The unit tier: the in-memory adapters, no emulator, no process of the local stack, no browser.
test-quick: install-test  ## the unit tier alone, no emulators (about 3 minutes)
	$(VENV)/bin/python -m pytest -q -m "not emulator and not slow and not browser" $(PARALLEL)

lint: install-test  ## ruff and strict mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The documentation site, strict: a warning, a broken link or a missing anchor fails it.
docs: install-test  ## the documentation site, into site/
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:  ## remove the virtualenvs, the local stack's state and the site
	rm -rf $(VENV) .venv-checkov .ackloop site
