"""The digits recipe cut to 60 steps (an evaluation every 20), for the training tests
that run whole stacks: enough for the seeds' curves, checkpoints and parity to be
checked, at a third of the built-in's steps.

Its learning rate warms up over 5 steps and then follows a cosine: every stack sets
the schedule's rate on its own optimizer, so the same losses step by step show the
rate came through. The checkpoint check runs past the last step, where the last
step's rate holds (small, not 0, so a lost optimizer state still shows); that the
schedule's place comes back with a reload is checked mid-schedule in test_train."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff import api

# A two-layer MLP on the digits, for recipes of their own (`factory = "mlp:build"`,
# `data = "d.npz"`): `write_mlp_and_digits` puts both beside the recipe.
MLP = """
import torch


def build():
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
    )
"""


def write_mlp_and_digits(folder: Path) -> None:
    from bakeoff.builtins import digits

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(folder / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (folder / "mlp.py").write_text(MLP)


SHORT_RECIPE = """
name = "digits-short"
[model]
kind = "torch"
factory = "bakeoff.builtins.digits:untrained"
[train]
data = "builtin:digits"
lr = 0.002
batch_size = 64
steps = 60
eval_every = 20
target = { metric = "accuracy", value = 0.8 }
tolerance = 0.05
schedule = "cosine"
warmup_steps = 5
"""
SCHEDULE_WORDS = "cosine from 0.002 towards 0 over 60 steps, after 5 warm-up steps"


def short_run(root: Path, stacks: tuple[str, ...]) -> dict:
    """One seed of the short recipe on `stacks`, 2 threads, a 5 s rounds budget."""
    recipe = root / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    options = api.TrainOptions(
        stacks=stacks, seeds=1, quick=True, threads=2, budget_s=5, store=root / "s.db"
    )
    return api.train(str(recipe), options).document


def trains_like_the_reference(mine: dict, ref: dict) -> None:
    """The same initial weights, data order and optimizer: the same losses to float
    rounding at first (the first-loss gate held them to the reference's already),
    and the same accuracy at the end within what summation order leaves."""
    (seed,), (ref_seed,) = mine["seeds"], ref["seeds"]
    assert not seed["diverged"] and seed["steps"] == ref_seed["steps"]
    assert mine["settings"]["lr_schedule"] == SCHEDULE_WORDS
    # Within the warm-up: a stack that took the base rate from the first update on
    # would be 4e-3 off the reference at the second loss already.
    assert np.allclose(seed["losses"][:8], ref_seed["losses"][:8], rtol=1e-3)
    assert seed["final_metric"] == pytest.approx(ref_seed["final_metric"], abs=0.05)
