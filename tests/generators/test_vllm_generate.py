"""vLLM's CPU build, driven through its own engine in its own environment
(`make vllm`), on a tiny random GPT-2 folder: at FP32 it writes PyTorch's greedy
tokens, its scheduler answers a batch with each prompt's own tokens, and its prompt
log-probabilities give PyTorch's perplexity.

The engine imports in the vLLM venv, not in the one these tests run in, so each
case runs a small script there. These tests need that venv (3.2 GB on disk) and run
under `make test-vllm` (marker `vllm`), not in make test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bakeoff import generators, runtime_envs
from tiny_gpt2 import PROMPTS, greedy, tiny_gpt2

pytestmark = pytest.mark.vllm

if generators.availability("vllm"):
    pytest.skip(str(generators.availability("vllm")), allow_module_level=True)

SCRIPT = """
import json, sys
from pathlib import Path
from bakeoff import generators

folder, precision, answer = sys.argv[1:4]
prompts = json.loads(sys.argv[4])
g = generators.load("vllm", Path(folder), 1, precision)
streamed = []
greedy = [g.generate(p, 16, streamed.append) for p in prompts]
batch = g.generate_batch(prompts, 16)
Path(answer).write_text(json.dumps({
    "greedy": greedy, "streamed": streamed, "batch": batch.tokens,
    "first_token_ns": batch.first_token_ns, "nll": g.nll(list(range(1, 60))),
    "settings": g.settings,
}))
"""


def _in_vllm_env(folder: Path, precision: str, tmp: Path) -> dict[str, Any]:
    python = runtime_envs.python_for("vllm")
    assert python is not None
    answer = tmp / f"{precision}.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-c", SCRIPT, str(folder), precision, str(answer), json.dumps(PROMPTS)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(answer.read_text())


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2"), vocab=320)


def test_vllm_at_fp32_writes_torchs_greedy_tokens_and_scores_alike(
    folder: Path, tmp_path: Path
) -> None:
    torch_gen = generators.load("torch", folder, threads=1)
    reference, _ = greedy(torch_gen)
    got = _in_vllm_env(folder, "fp32", tmp_path)
    assert got["greedy"] == reference
    # each token reached on_token as the engine's step produced it
    assert got["streamed"] == [t for out in reference for t in out]
    # submitted together, each prompt gets its own greedy tokens from the scheduler
    assert got["batch"] == reference
    assert len(got["first_token_ns"]) == len(PROMPTS) and min(got["first_token_ns"]) > 0
    nll, count = got["nll"]
    want_nll, want_count = torch_gen.nll(list(range(1, 60)))
    assert count == want_count and nll == pytest.approx(want_nll, rel=1e-3)
    settings = got["settings"]
    assert settings["batching"].startswith("continuous batching")
    assert settings["dtype"] == "float32" and settings["prefix_caching"] is False
    assert settings["kv_cache_space_gib"] > 0 and settings["kv_cache_block_size"] > 0


def test_a_precision_vllm_does_not_run_here_is_named(folder: Path) -> None:
    python = runtime_envs.python_for("vllm")
    assert python is not None
    done = subprocess.run(
        [str(python), "-c",
         "import sys; from pathlib import Path; from bakeoff import generators; "
         "generators.load('vllm', Path(sys.argv[1]), 1, 'int4')", str(folder)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0 and "vllm runs fp32, bf16 here, not int4" in done.stderr
