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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bakeoff.generators import OnToken


def _threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)


class _Streamer:
    """`generate`'s streamer: the first `put` is the prompt, each later one the
    token just chosen for every sequence (batch 1 here)."""

    def __init__(self, on_token: OnToken) -> None:
        self.on_token = on_token
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.on_token(int(token))

    def end(self) -> None:
        pass


class TorchGenerator:
    def __init__(self, runtime: str, model: Any, max_positions: int) -> None:
        self.runtime = runtime
        self.model = model
        self.max_positions = max_positions
        self.eos = model.generation_config.eos_token_id

    def generate(self, prompt: Sequence[int], max_new_tokens: int, on_token: OnToken) -> list[int]:
        import torch

        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(
                f"a {len(prompt)}-token prompt plus {max_new_tokens} new tokens exceeds the "
                f"model's {self.max_positions} positions"
            )
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                streamer=_Streamer(on_token),
                pad_token_id=self.eos if isinstance(self.eos, int) else None,
            )
        new = out[0, len(prompt) :].tolist()
        eos = {self.eos} if isinstance(self.eos, int) else set(self.eos or ())
        for i, token in enumerate(new):
            if token in eos:
                return [int(t) for t in new[:i]]
        return [int(t) for t in new]

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


def load(runtime: str, folder: Path, threads: int) -> TorchGenerator:
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
    return TorchGenerator(runtime, model, max_positions)
