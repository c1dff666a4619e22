"""Full fine-tuning against LoRA on the real libraries (transformers' BERT, peft):
a tiny BERT built from a config (nothing downloaded) classifying real text, the
standard library's docstrings by package, tokenized by the MiniLM tokenizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api

TINY_TEXT = """
import torch
from transformers import BertConfig, BertModel


class TinyTextClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = BertConfig(
            vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64,
        )
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.head = torch.nn.Linear(32, 8)

    def forward(self, ids):
        mask = ids != 0
        hidden = self.encoder(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))


def untrained():
    return TinyTextClassifier()
"""

RECIPE = """
name = "tiny-text"
[model]
kind = "torch"
factory = "tiny_text:untrained"
[train]
data = "docstrings.npz"
lr = 0.002
batch_size = 16
steps = 40
eval_every = 20
target = { metric = "accuracy", value = 0.2 }
tolerance = 0.5
stacks = ["full", "lora"]
stack_lr = { lora = 0.005 }
lora = { targets = ["query", "value"], rank = 4, alpha = 8, train = ["head"] }
"""


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from bakeoff.builtins import minilm_finetune

    root = tmp_path_factory.mktemp("lora")
    x_train, y_train, x_val, y_val = minilm_finetune.train_and_validation()
    np.savez(root / "docstrings.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (root / "tiny_text.py").write_text(TINY_TEXT)
    (root / "recipe.toml").write_text(RECIPE)
    options = api.TrainOptions(seeds=1, quick=True, threads=2, budget_s=3, store=root / "s.db")
    return api.train(str(root / "recipe.toml"), options).document


def test_full_and_lora_train_side_by_side_and_say_what_each_trains(lora_run: dict) -> None:
    by = {c["id"]: c for c in lora_run["candidates"]}
    assert list(by) == ["full", "lora"]
    full, lora = by["full"], by["lora"]
    assert full["status"] == "ok" and lora["status"] == "ok", (full["reason"], lora["reason"])
    assert lora_run["workload"]["reference"] == "full"
    # Only the adapters (rank 4 on query and value, 2 layers) and the head train.
    adapters = 2 * 2 * 4 * (32 + 32)
    head = 32 * 8 + 8
    assert lora["trainable_parameters"] == adapters + head
    assert full["trainable_parameters"] == full["settings"]["model_parameters"]
    assert lora["settings"]["model_parameters"] == full["settings"]["model_parameters"]
    assert lora["settings"]["method"] == "LoRA (peft)" and lora["settings"]["lr"] == 0.005
    assert full["settings"]["lr"] == 0.002
    for c in (full, lora):
        sps = c["samples_per_s"]
        assert sps["ci95"][0] <= sps["value"] <= sps["ci95"][1]
        assert c["peak_rss_mb"]["max_rank"] > 0 and c["final_metric"]["mean"] > 0
        (seed,) = c["seeds"]
        assert not seed["diverged"] and seed["steps"] == 40
        # Dropout draws from the RNG: the checkpoint carries its state, so the two
        # steps after the reload take the same masks and equal the two without it.
        ck = c["checkpoint"]
        assert ck["reload_identical"] is True and ck["steps_compared"] == 2
    # LoRA's checkpoint is its adapters and head (and their optimizer state), not
    # the frozen base model.
    assert lora["checkpoint"]["size_mb"] < full["checkpoint"]["size_mb"] / 10
    # Its step computes no gradient for the frozen weights: fewer FLOPs, counted apart.
    assert 0 < lora["flops_per_step"] < full["flops_per_step"]
    # B starts at zero: LoRA's first loss is the base model's, the reference's
    # (the gate let it through), and its first losses follow from there.
    assert lora["seeds"][0]["losses"][0] == pytest.approx(full["seeds"][0]["losses"][0], rel=1e-5)


def test_lora_without_adapters_named_is_unavailable_and_says_what_to_add(tmp_path: Path) -> None:
    """Said before anything trains (the run marks the stack so, `why_unavailable`)."""
    from bakeoff.builtins import digits
    from bakeoff.training.pipeline import candidate, why_unavailable
    from bakeoff.training.recipe import load_recipe

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(tmp_path / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (tmp_path / "recipe.toml").write_text(
        'name = "d"\n[model]\nkind = "torch"\nfactory = "bakeoff.builtins.digits:untrained"\n'
        '[train]\ndata = "d.npz"\nlr = 0.002\nsteps = 10\ntarget = { value = 0.5 }\n'
        'stacks = ["torch", "lora"]\n'
    )
    recipe = load_recipe(str(tmp_path / "recipe.toml"), quick=True)
    why = why_unavailable(candidate("lora", recipe, None), recipe, threads=2)
    assert why is not None and "[train] lora = { targets" in why


def test_the_docstring_set_is_real_labelled_text_from_the_standard_library() -> None:
    from bakeoff.builtins import minilm_finetune as m

    text, labels = m.texts()
    assert len(set(text)) == len(text)
    counts = np.bincount(labels, minlength=len(m.PACKAGES))
    assert (counts >= m.PER_CLASS // 2).all() and counts.max() <= m.PER_CLASS
    # Drawn with a fixed seed: the same set every time on the same Python.
    assert m.texts()[0] == text
    x_train, _, _, y_val = m.train_and_validation()
    assert x_train.dtype == np.int64 and x_train.shape[1] == m.MAX_TOKENS
    assert set(np.unique(y_val)) == set(range(len(m.PACKAGES)))  # stratified
    assert 5 < m.tokens_per_row(x_train) < m.MAX_TOKENS


@pytest.mark.slow
def test_the_builtin_minilm_recipe_reports_full_and_lora_side_by_side(tmp_path: Path) -> None:
    """The acceptance run: all-MiniLM-L6-v2, 3 seeds of each (several minutes)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakeoff.cli",
            "train",
            "builtin:minilm-finetune",
            "--quick",
            "--store",
            str(tmp_path / "s.db"),
            "--json",
            str(tmp_path / "t.json"),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    doc = json.loads((tmp_path / "t.json").read_text())
    by = {c["id"]: c for c in doc["candidates"]}
    for c in by.values():
        assert c["status"] in ("ok", "flagged"), c["reason"]
        assert len(c["seeds"]) == 3 and c["tokens_per_s"]["value"] > 0
    assert by["lora"]["trainable_parameters"] < by["full"]["trainable_parameters"] / 100
    assert "parameters trained" in proc.stdout and "tokens/s" in proc.stdout
