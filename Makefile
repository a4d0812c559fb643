# The README's two commands: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_KUBECTL := $(VENV)/kubernetes-client/usr/bin/kubectl
# Python keeps each module it compiles (__pycache__): where the environment turns that off, each of the
# hundreds of processes the tests start would compile gpuwatch and the test modules again. So pip installs
# with --no-compile: it would compile every module of every package (plotly's and the Kubernetes client's
# thousands), half of a fresh install's time, where the first import compiles the few hundred used.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = pip install --quiet --no-compile

.PHONY: demo test check install test-deps lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP_INSTALL) --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/$(PIP_INSTALL) -e '.[test]'
	touch $@

install: $(VENV)/.installed

# make demo PORT=8051 HOST=0.0.0.0 serves elsewhere.
HOST ?= 127.0.0.1
PORT ?= 8050
demo: install
	$(BIN)/gpuwatch serve --demo --host $(HOST) --port $(PORT)

# Debian packages the integration tests drive for real: Prometheus/promtool, VictoriaMetrics, headless
# Chromium, kubectl.
test-deps: $(DEBIAN_KUBECTL)
	@command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v victoria-metrics >/dev/null \
	  && command -v chromium >/dev/null && command -v kubectl >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus \
	    victoria-metrics chromium $$(command -v kubectl >/dev/null || echo kubernetes-client); }

# Debian's kubectl (kubernetes-client) unpacked beside whatever kubectl the machine has, so the kubectl
# tests run against it as well as against a current one (the packages conflict: both own /usr/bin/kubectl).
$(DEBIAN_KUBECTL): | $(BIN)/python
	mkdir -p $(VENV)/kubernetes-client
	cd $(VENV)/kubernetes-client && { apt-get download kubernetes-client 2>/dev/null \
	  || { $(SUDO) apt-get update -qq && apt-get download kubernetes-client; }; } \
	  && dpkg-deb -x kubernetes-client_*.deb . && rm -f kubernetes-client_*.deb
	test -x $@

lint: install
	$(BIN)/ruff check src tests benchmarks app.py
	$(BIN)/ruff format --check src tests benchmarks app.py

typecheck: install
	$(BIN)/mypy

# Day to day: ruff, mypy and the unit tests (tests/unit: no Prometheus, no browser) on every core, in minutes.
check: lint typecheck
	$(BIN)/python -m pytest -q -n auto tests/unit

# Everything, in parallel. The two virtualenvs and the Debian packages install side by side; then ruff, mypy
# and the tests run side by side (mypy takes one core for half a minute, which the tests, waiting a third
# of their time, mostly leave idle). make test fails if any of them fails.
test:
	$(MAKE) --no-print-directory -j3 install test-deps focus-validator
	$(MAKE) --no-print-directory -j3 lint typecheck all-tests

# The tests: a module's tests stay in one worker (its servers are built once), the longest modules first
# (tests/conftest.py). The integration tests wait a third of their time (for deadlines, for scrapes, for
# a page to draw), so there are half again as many workers as cores. The rule files' promtool check and
# unit tests are tests of the suite.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 3 / 2 )))
.PHONY: all-tests
all-tests: install test-deps focus-validator
	GPUWATCH_TEST_KUBECTL=$(abspath $(DEBIAN_KUBECTL)) \
	GPUWATCH_TEST_FOCUS_VALIDATOR=$(abspath $(FOCUS_VENV))/bin/focus-validator $(BIN)/python -m pytest \
	  -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=10

# The FinOps Foundation's focus-validator, which the FOCUS tests run, in a virtualenv of its own: it needs
# Python >= 3.12 (pyenv's where the system's is older) and pins numpy below 2, so an older pyarrow beside it.
FOCUS_VENV := .venv-focus
FOCUS_PYTHON ?= $(shell python3.12 -c '' 2>/dev/null && command -v python3.12 || { \
  v=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12\.[0-9]+$$' | tail -1); \
  [ -n "$$v" ] && echo "$$(pyenv prefix $$v)/bin/python3"; } || \
  ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12.*/bin/python3.12 2>/dev/null | tail -1)
.PHONY: focus-validator
focus-validator: $(FOCUS_VENV)/.installed
$(FOCUS_VENV)/.installed:
	@test -n "$(FOCUS_PYTHON)" || { echo "focus-validator needs Python >= 3.12 and none was found"; exit 1; }
	$(FOCUS_PYTHON) -m venv $(FOCUS_VENV)
	$(FOCUS_VENV)/bin/$(PIP_INSTALL) 'focus-validator==2.2.1' 'pyarrow<18'
	touch $@

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
	rm -rf $(VENV) $(FOCUS_VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts
