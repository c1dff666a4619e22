"""A tiny random GPT-2 folder for the generation tests, and greedy generation on it
with each token's arrival time."""

from __future__ import annotations

import time
from pathlib import Path

from bakeoff import generators
from bakeoff.builtins import tiny_lm
from bakeoff.judge import generation as gen


def tiny_gpt2(
    folder: Path, seed: int = 0, noise: float = 0.0, vocab: int = 256, activation: str = "gelu_new"
) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab, n_positions=128, n_embd=64, n_layer=2, n_head=2,
        bos_token_id=0, eos_token_id=0, activation_function=activation,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    if noise:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * noise)
    model.save_pretrained(folder)
    return folder


PROMPTS = [[5, 6, 7], [11, 12, 13, 14, 15, 16, 17], [40, 41], [100] * 12]


def greedy(g: generators.Generator, new: int = 16) -> tuple[list[list[int]], list]:
    outs, timings = [], []
    for prompt in PROMPTS:
        stamps: list[int] = []
        start = time.perf_counter_ns()
        outs.append(g.generate(prompt, new, lambda _t, s=stamps: s.append(time.perf_counter_ns())))
        timings.append(gen.RequestTiming(start, tuple(stamps)))
    return outs, timings


def with_tokenizer(folder: Path) -> Path:
    tokenizer = tiny_lm._tokenizer(["def __init__(self, name): return self.name"] * 20)
    tokenizer.save_pretrained(folder)
    return folder


SHORT = ["def __init__(self, name):", "return self.name", "self.name = name"]
LONG = ["def __init__(self, name): return self.name def __init__(self, name): return self"]


def generation_workload(folder: Path, *, extra_data: str = "", quality: str = "") -> Path:
    """A text-generation workload on a tiny GPT-2 with a tokenizer: short prompts and
    one long one, a held-out text, 8 new tokens each."""
    model = with_tokenizer(tiny_gpt2(folder / "model", vocab=320))
    (folder / "prompts.txt").write_text("\n".join(SHORT + LONG) + "\n")
    (folder / "heldout.txt").write_text("self.name = name\nreturn self\n")
    path = folder / "gen.toml"
    path.write_text(
        f"""name = "tiny-gpt2"

[model]
kind = "hf"
path = "{model.name}"
task = "text-generation"

[data]
prompts = "prompts.txt"
perplexity_text = "heldout.txt"
max_new_tokens = 8
{extra_data}
{quality}
"""
    )
    return path
