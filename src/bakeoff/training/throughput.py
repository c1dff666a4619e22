"""A stack's throughput figures: samples/s (with its bootstrap CI) and tokens/s over
the timed rounds, one training step's FLOPs as torch counts them, and the FLOP/s
achieved as a share of this machine's GEMM peak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.efficiency import candidate_efficiency
from bakeoff.judge import stats
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.recipe import Recipe
from bakeoff.training.specs import stack_spec


def samples_per_s(c: TrainCandidate, recipe: Recipe) -> dict[str, Any] | None:
    """Samples/s over the timed rounds, with the bootstrap CI: {"value", "ci95"}."""
    samples = c.samples()
    if not c.rounds_ns or not samples.size:
        return None
    calls = np.full(samples.shape[0], samples.shape[1])
    iv = stats.throughput(calls, np.asarray(c.block_ns), recipe.batch_size)
    return {"value": iv.value, "ci95": [iv.lo, iv.hi]}


def tokens_per_s(sps: dict[str, Any] | None, recipe: Recipe) -> dict[str, Any] | None:
    """Text: samples/s times the real (not padding) tokens per example."""
    if sps is None or recipe.tokens_per_row is None:
        return None
    k = recipe.tokens_per_row
    return {"value": sps["value"] * k, "ci95": [v * k for v in sps["ci95"]], "per_sample": k}


def step_flops(model: Any, x: Any, y: Any) -> int | None:
    """The FLOPs (2 per multiply-add) of one training step's forward and backward on
    the global batch (x, y), counted by torch's own FLOP counter as the step runs:
    matrix products and convolutions, the GEMM work a GEMM peak is a limit for, as
    the inference count takes them from the ONNX graph; the backward exactly as
    autograd runs it (no input gradient for the first layer), not as a rule of
    thumb. The optimizer's elementwise update is not counted. None if it fails."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.enable_grad():
            torch.nn.functional.cross_entropy(model(x), y).backward()
        model.zero_grad(set_to_none=True)
        total = int(counter.get_total_flops())
    except Exception:  # a figure beside the measurement never fails the run
        return None
    return total or None


def lora_step_flops(model: Any, recipe: Recipe, x: Any, y: Any) -> int | None:
    """LoRA's step: the same forward, plus the adapters', and a backward that computes
    no gradient for the frozen weights, so fewer FLOPs than full fine-tuning's; counted
    on the model with the very adapters the stack adds."""
    import copy

    from bakeoff.stacks.torch_stacks import with_lora

    spec = stack_spec(recipe, "lora", Path(), Path(), 0, 1)
    try:
        wrapped = with_lora(copy.deepcopy(model), spec)
    except (ImportError, RuntimeError):  # the stack says why (unavailable, or its worker's)
        return None
    return step_flops(wrapped, x, y)


def gemm_precision(stack: str) -> str:
    """The precision whose GEMM peak a stack's FLOP/s are a share of."""
    return "bf16" if stack == "torch-bf16" else "fp32"


def flops_efficiency(
    c: TrainCandidate,
    sps: dict[str, Any] | None,
    flops: int | None,
    peaks: dict[str, Any],
    recipe: Recipe,
) -> dict[str, Any] | None:
    """Achieved FLOP/s at the measured samples/s, and its share of this machine's
    GEMM peak for the stack's precision (BF16 autocast: the BF16 peak where the
    CPU has native BF16, else FP32's), over all of the run's threads."""
    if not flops or not sps or c.nodes:  # this machine's peak is not the nodes'
        return None
    precision = gemm_precision(c.stack)
    per_sample = max(1, round(flops / recipe.batch_size))
    found = candidate_efficiency(per_sample, sps["value"], peaks, precision)
    if found is None:
        return None
    return {"flops_per_step": flops, "precision": precision, **found}
