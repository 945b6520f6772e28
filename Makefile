# The two commands of the README, and what they need. Works on a fresh machine with Python 3.11+
# and Java 11+ (the emulators); everything else is installed into .venv.
PYTHON ?= python3
VENV ?= .venv
Q ?= are there any weather alerts where I am?

.PHONY: install install-test ask test lint checkov clean

# What `make ask` needs: the runtime and the development tools (the local stack's sandbox and
# fake Gemini server), without the benchmark's Temporal peer and chart.
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e . -e ./devtools
	touch $@

# What the tests and the linters need on top: pytest, ruff, mypy, the deployment checks, the MCP
# SDK and the benchmark's extras (tests/bench runs the Temporal side).
install-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/pip install -q -e '.[dev,infra,mcp,eval]' -e './devtools[bench]'
	touch $@

# checkov pins packages that clash with ours: it lives in its own virtualenv.
checkov: .venv-checkov/bin/checkov

.venv-checkov/bin/checkov:
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q checkov==3.3.30

# Ask the agent a question end to end: emulators, functions, the question, the answer.
ask: install
	$(VENV)/bin/ackloop dev down >/dev/null 2>&1 || true
	$(VENV)/bin/ackloop dev up
	$(VENV)/bin/ackloop ask "$(Q)"; status=$$?; $(VENV)/bin/ackloop dev down; exit $$status

# Every test tier: unit, contract (memory + Firestore emulator), end to end, infra checks.
test: install-test checkov
	$(VENV)/bin/python -m pytest -q -ra --durations=25

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .venv-checkov .ackloop
