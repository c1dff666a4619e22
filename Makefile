# Everything starts from a fresh machine: the venv is created and filled here.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-slow test-gpu lint format typecheck bench clean frameworks

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed alone first, pinned, so nothing later can pull a CUDA build.
$(STAMP): pyproject.toml $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PIP) install --quiet -e '.[test]'
	touch $(TEST_STAMP)

# The optional frameworks (Keras 3, JAX, TensorFlow, LiteRT) for `bakeoff run`;
# make test installs them too, since its tests run each framework path.
frameworks: $(STAMP)
	$(PIP) install --quiet -e '.[frameworks]'

demo: $(STAMP)
	$(VENV)/bin/bakeoff run builtin:minilm

# pytest exit code 5 (no tests collected) is a failure here, never a pass.
test: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest -m "not slow and not gpu" --durations=10; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

test-slow: $(TEST_STAMP)
	$(PY) -m pytest -m slow

test-gpu: $(TEST_STAMP)
	$(PY) -m pytest -m gpu

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

format: $(TEST_STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

typecheck: $(TEST_STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/time_to_verdict.py

clean:
	rm -rf $(VENV) .bakeoff build *.egg-info src/*.egg-info
