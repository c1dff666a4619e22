"""Generative runtimes: one module per runtime, behind one small interface.

A generative runtime loads a causal-LM folder (or what was built from it) and
answers two questions, both in token ids so that every runtime is given the same
prompt and judged on the same tokens: `generate` greedy output tokens for a prompt,
calling `on_token` as each one arrives (the timestamps that time to first token and
time per output token come from), `generate_batch` the same for several prompts
submitted at once, through the runtime's own batching (the concurrency sweep), and
`nll`, the summed negative log-likelihood of a text's tokens (perplexity). Heavy
imports happen inside each module's `load`.

`RUNTIMES` is the registry; `availability` says whether a runtime can be used here,
with the command that installs it, without importing it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

OnToken = Callable[[int], None]


@dataclass(frozen=True)
class Batch:
    """A batch of requests submitted at once, answered: each request's greedy tokens
    (its end-of-text not included) and when its first token came, in ns after the
    batch was submitted (a request that wrote none: when its answer came)."""

    tokens: list[list[int]]
    first_token_ns: list[int]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.first_token_ns):
            raise ValueError("a batch answer needs one first-token time per request")


class Generator(Protocol):
    runtime: str
    # What the runtime applied (threads, precision hints, the batching it does), for
    # the candidate's settings.
    settings: dict[str, Any]

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        """Greedy output tokens after `prompt` (at most `max_new_tokens`; fewer when
        the model writes its end-of-text, which is not included)."""
        ...

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        """Greedy output tokens for every prompt, submitted together: the runtime
        batches them its own way (padded static batches, or one after another where
        it has no batching; `settings["batching"]` says which)."""
        ...

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        """(summed negative log-likelihood in nats, tokens predicted): each token
        after the first, given those before it."""
        ...


def one_after_another(
    generate: Callable[[Sequence[int], int, OnToken], list[int]],
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
) -> Batch:
    """A batch answered by a runtime without batching: each request queued behind
    those before it, its first token timed from the batch's submission."""
    import time

    start = time.perf_counter_ns()
    tokens: list[list[int]] = []
    first: list[int] = []
    for prompt in prompts:
        stamps: list[int] = []

        def stamp(_token: int, stamps: list[int] = stamps) -> None:
            stamps.append(time.perf_counter_ns())

        tokens.append(generate(prompt, max_new_tokens, stamp))
        first.append((stamps[0] if stamps else time.perf_counter_ns()) - start)
    return Batch(tokens, first)


def until_end(tokens: Sequence[int], eos: set[int]) -> list[int]:
    """The tokens before the first end-of-text."""
    for i, token in enumerate(tokens):
        if token in eos:
            return [int(t) for t in tokens[:i]]
    return [int(t) for t in tokens]


def summed_nll(logits: Any, targets: Sequence[int]) -> float:
    """The summed negative log-likelihood (nats) of `targets` under `logits`, one row
    of logits per target, in float64."""
    import numpy as np

    rows = np.asarray(logits, dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
    picked = rows[np.arange(len(targets)), np.asarray(targets)]
    return float((log_z - picked).sum())


def eos_ids(value: int | Sequence[int] | None) -> set[int]:
    """A config's end-of-text id(s) as a set."""
    if value is None:
        return set()
    return {int(value)} if isinstance(value, int) else {int(v) for v in value}


# runtime -> (module, the packages it imports, the extra that installs them; "" for
# bakeoff's own dependencies)
RUNTIMES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "torch": ("bakeoff.generators.torch_generate", ("torch", "transformers"), ""),
    "torch-compile": ("bakeoff.generators.torch_generate", ("torch", "transformers"), ""),
    "onnxruntime-genai": (
        "bakeoff.generators.onnxruntime_genai_generate",
        ("onnxruntime_genai",),
        "genai",
    ),
    "openvino-genai": ("bakeoff.generators.openvino_genai_generate", ("openvino_genai",), "genai"),
    "llama-cpp": ("bakeoff.generators.llama_cpp_generate", ("llama_cpp", "gguf"), "llama-cpp"),
    "mlx": ("bakeoff.generators.mlx_generate", ("mlx", "mlx_lm"), "mlx"),
    # in an environment of its own (bakeoff.runtime_envs): its packages are there
    "vllm": ("bakeoff.generators.vllm_generate", ("vllm",), ""),
}


# Runtimes a generative bake-off names that bakeoff does not drive yet, and why.
NOT_YET: dict[str, str] = {}


def availability(runtime: str) -> str | None:
    """None when `runtime` can be loaded here, else why not and how to install it."""
    from bakeoff import runtime_envs

    if runtime in NOT_YET:
        return NOT_YET[runtime]
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown generative runtime {runtime!r} (have: {', '.join(RUNTIMES)})")
    if runtime in runtime_envs.OWN:
        return runtime_envs.unavailable(runtime)
    _, packages, extra = RUNTIMES[runtime]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        target = f"bakeoff[{extra}]" if extra else "bakeoff"
        return f"{runtime} needs {', '.join(missing)}, not installed: pip install '{target}'"
    return None


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> Generator:
    """The runtime's generator on `folder` (or the file built from it). Every runtime
    is told the precision: one that applies it as it loads (MLX quantizes in memory)
    uses it; the others were given a file built at it."""
    import sys

    from bakeoff import runtime_envs

    why = availability(runtime)
    if runtime in runtime_envs.OWN:
        # Its worker runs in that environment: there the engine imports, or not.
        packages = RUNTIMES[runtime][1]
        missing = [p for p in packages if importlib.util.find_spec(p) is None]
        why = f"{', '.join(missing)} is not installed for {sys.executable}" if missing else None
    if why:
        raise RuntimeError(why)
    module = importlib.import_module(RUNTIMES[runtime][0])
    return module.load(runtime, folder, threads, precision)
