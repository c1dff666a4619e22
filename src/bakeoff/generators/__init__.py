"""Generative runtimes: one module per runtime, behind one small interface.

A generative runtime loads a causal-LM folder (or what was built from it) and
answers two questions, both in token ids so that every runtime is given the same
prompt and judged on the same tokens: `generate` greedy output tokens for a prompt,
calling `on_token` as each one arrives (the timestamps that time to first token and
time per output token come from), and `nll`, the summed negative log-likelihood of a
text's tokens (perplexity). Heavy imports happen inside each module's `load`.

`RUNTIMES` is the registry; `availability` says whether a runtime can be used here,
with the command that installs it, without importing it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

OnToken = Callable[[int], None]


class Generator(Protocol):
    runtime: str

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        """Greedy output tokens after `prompt` (at most `max_new_tokens`; fewer when
        the model writes its end-of-text, which is not included)."""
        ...

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        """(summed negative log-likelihood in nats, tokens predicted): each token
        after the first, given those before it."""
        ...


# runtime -> (module, the packages it imports, the extra that installs them; "" for
# bakeoff's own dependencies)
RUNTIMES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "torch": ("bakeoff.generators.torch_generate", ("torch", "transformers"), ""),
    "torch-compile": ("bakeoff.generators.torch_generate", ("torch", "transformers"), ""),
    "llama-cpp": ("bakeoff.generators.llama_cpp_generate", ("llama_cpp", "gguf"), "llama-cpp"),
}


# Runtimes a generative bake-off names that bakeoff does not drive yet, and why.
NOT_YET: dict[str, str] = {
    "onnxruntime-genai": (
        "bakeoff does not drive ONNX Runtime GenAI yet; note that its model builder "
        "(0.18) takes Llama, Mistral, Phi, Qwen, Gemma and similar architectures, not GPT-2"
    ),
    "openvino-genai": (
        "bakeoff does not drive OpenVINO GenAI yet: its models come from optimum-intel's "
        "export, and optimum-intel 2.2 does not install beside torch 2.13.0 (it requires "
        "torch 2.14.1 and the CUDA libraries)"
    ),
    "vllm": "bakeoff does not drive vLLM yet; it also needs an NVIDIA GPU",
}


def availability(runtime: str) -> str | None:
    """None when `runtime` can be loaded here, else why not and how to install it."""
    if runtime in NOT_YET:
        return NOT_YET[runtime]
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown generative runtime {runtime!r} (have: {', '.join(RUNTIMES)})")
    _, packages, extra = RUNTIMES[runtime]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        target = f"bakeoff[{extra}]" if extra else "bakeoff"
        return f"{runtime} needs {', '.join(missing)}, not installed: pip install '{target}'"
    return None


def load(runtime: str, folder: Path, threads: int) -> Generator:
    why = availability(runtime)
    if why:
        raise RuntimeError(why)
    module = importlib.import_module(RUNTIMES[runtime][0])
    return module.load(runtime, folder, threads)
