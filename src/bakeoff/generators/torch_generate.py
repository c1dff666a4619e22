"""PyTorch generation through Hugging Face's own `generate`: `torch` (eager, a
dynamic KV cache: the reference) and `torch-compile` (a static KV cache and the
model's forward under `torch.compile`, as Hugging Face's guide to fast generation
sets it up; the compile happens on the first calls, which the caller times apart).

Greedy decoding, the folder's own weights, no code from the folder (remote code
is refused). Output tokens are reported by a streamer that `generate` calls as
each token is chosen, so their timestamps are the runtime's own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import Batch, OnToken, eos_ids, until_end


def _threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)


class _Streamer:
    """`generate`'s streamer: the first `put` is the prompts, each later one the
    tokens just chosen, one per sequence (`on_step` gets them as a list)."""

    def __init__(self, on_step: Callable[[list[int]], None]) -> None:
        self.on_step = on_step
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.on_step([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        pass


class TorchGenerator:
    def __init__(self, runtime: str, model: Any, max_positions: int, threads: int) -> None:
        self.runtime = runtime
        self.model = model
        self.max_positions = max_positions
        self.eos = eos_ids(model.generation_config.eos_token_id)
        self.pad = min(self.eos) if self.eos else 0  # a batch's padding: never attended to
        self.settings: dict[str, Any] = {
            "threads": threads,
            "interop_threads": 1,
            "cache": "static" if runtime == "torch-compile" else "dynamic",
            "batching": "static batches: the prompts left-padded to the longest",
        }

    def _fits(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )

    def _generate(self, ids: Any, mask: Any, max_new_tokens: int, streamer: _Streamer) -> Any:
        import torch

        with torch.inference_mode():
            return self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                streamer=streamer,
                pad_token_id=self.pad,
            )

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        import torch

        self._fits(prompt, max_new_tokens)
        ids = torch.tensor([list(prompt)], dtype=torch.long)

        def each(step: list[int]) -> None:
            on_token(step[0])

        out = self._generate(ids, torch.ones_like(ids), max_new_tokens, _Streamer(each))
        return until_end(out[0, len(prompt) :].tolist(), self.eos)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Batch:
        import torch

        for prompt in prompts:
            self._fits(prompt, max_new_tokens)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        first: list[int] = []
        start = time.perf_counter_ns()

        def each(_step: list[int]) -> None:
            if not first:
                first.append(time.perf_counter_ns() - start)

        out = self._generate(ids, mask, max_new_tokens, _Streamer(each))
        done = time.perf_counter_ns() - start
        tokens = [until_end(row[width:].tolist(), self.eos) for row in out]
        # Every sequence of a static batch gets its first token at the same step.
        return Batch(tokens, [first[0] if first else done] * len(prompts))

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        import torch

        if len(tokens) < 2:
            return 0.0, 0
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.inference_mode():
            # The class's eager forward even for torch-compile (whose instance forward is
            # compiled for generate's static cache): the same weights, no recompiles.
            forward = type(self.model).forward
            logits = forward(self.model, input_ids=ids, use_cache=False).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
        return float(nll), len(tokens) - 1


def load(runtime: str, folder: Path, threads: int, precision: str = "fp32") -> TorchGenerator:
    # `precision`: the file (or folder) given was built at it
    import torch
    from transformers import AutoModelForCausalLM

    _threads(threads)
    model = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, trust_remote_code=False, dtype=torch.float32
    ).eval()
    max_positions = int(
        getattr(model.config, "n_positions", None)
        or getattr(model.config, "max_position_embeddings", 0)
        or 2048
    )
    if runtime == "torch-compile":
        model.generation_config.cache_implementation = "static"
        # Shapes as torch.compile decides them: the prefill is compiled again for a
        # second prompt length, then with a dynamic length; each decode step has one.
        model.forward = torch.compile(model.forward)
    return TorchGenerator(runtime, model, max_positions, threads)
