# The README's two commands: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test install test-deps lint typecheck unit bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/gpuwatch serve --demo --host 127.0.0.1 --port 8050

# Debian packages the integration tests drive for real: Prometheus/promtool and headless Chromium.
test-deps:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v chromium >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus chromium; }

lint: install
	$(BIN)/ruff check src tests benchmarks app.py
	$(BIN)/ruff format --check src tests benchmarks app.py

typecheck: install
	$(BIN)/mypy

test: install test-deps lint typecheck rules
	$(BIN)/python -m pytest

# Prometheus rules: syntax (promtool check) and unit tests (promtool test), alerts/tests/*.yml.
.PHONY: rules prometheusrule
rules: test-deps
	promtool check rules alerts/*.rules.yml
	promtool test rules alerts/tests/*.yml

# deploy/prometheusrule.yaml is generated from alerts/*.rules.yml; a test checks it is in sync.
prometheusrule: install
	$(BIN)/python deploy/gen_prometheusrule.py

bench: install
	$(BIN)/python benchmarks/simulate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts
