"""The digits recipe cut to 60 steps (an evaluation every 20), for the training tests
that run whole stacks: enough for the seeds' curves, checkpoints and parity to be
checked, at a third of the built-in's steps. And the same recipe's first 12 steps on
one stack at a time, each in a worker of its own (`train_alone`): how make test
checks every stack, where a whole run of several (timed rounds, then a fresh worker
per seed) is `slow`.

Its learning rate warms up over 5 steps and then follows a cosine: every stack sets
the schedule's rate on its own optimizer, so the same losses step by step show the
rate came through. The checkpoint check runs past the last step, where the last
step's rate holds (small, not 0, so a lost optimizer state still shows); that the
schedule's place comes back with a reload is checked mid-schedule in test_train."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff import api, stacks

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


# The recipe's first steps, with a warm-up and a cosine of their own, so that the
# schedule shows within them: a stack that took the base rate from the first update
# on is off the reference from the second loss.
FEW_STEPS, FEW_EVAL_EVERY, FEW_WARMUP = 12, 6, 3


def write_digits_and_init(folder: Path) -> tuple[Path, Path]:
    """The digits recipe's data and its seed-0 initial weights, as a run writes them."""
    import torch
    from safetensors.torch import save_file

    from bakeoff.builtins import digits

    data, init = folder / "d.npz", folder / "init.safetensors"
    if not init.exists():
        x_train, y_train, x_val, y_val = digits.train_and_validation()
        np.savez(data, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
        torch.manual_seed(0)
        save_file(digits.untrained().state_dict(), str(init))
    return data, init


def train_alone(root: Path, names: tuple[str, ...]) -> dict[str, dict]:
    """Seed 0 of the recipe's first `FEW_STEPS` on each stack, each in a worker of its
    own as a run trains a seed (a `TargetJob`), with the checkpoint check after it.
    A 2-process stack gets 2 threads, one a rank; the others 1."""
    from bakeoff.stacks.spec import TrainSpec
    from bakeoff.training.messages import TargetJob
    from bakeoff.trials.launcher import LocalLauncher

    data, init = write_digits_and_init(root)
    launcher = LocalLauncher(root / "logs")
    out = {}
    for name in names:
        processes = stacks.BY_NAME[name].processes
        spec = TrainSpec(
            stack=name,
            factory="bakeoff.builtins.digits:untrained",
            init_path=str(init),
            data_path=str(data),
            seed=0,
            batch_size=64,
            lr=2e-3,
            threads=processes,
            candidate_id=name,
            processes=processes,
            schedule="cosine",
            warmup_steps=FEW_WARMUP,
            total_steps=FEW_STEPS,
        )
        job = TargetJob(
            train=spec,
            max_steps=FEW_STEPS,
            eval_every=FEW_EVAL_EVERY,
            target=0.8,
            checkpoint_path=str(root / f"{name}.ckpt"),
        )
        out[name] = launcher.run(job, name, 600)
    return out


def steps_like_the_reference(mine: dict, ref: dict) -> None:
    """A stack trained alone (`train_alone`) took the reference's steps: the same
    first loss (the seed weights on the first batch, so the weights came over,
    layout and all), then the same losses step by step to float rounding (the same
    data order, optimizer and learning rate at every step), and a checkpoint that
    brings back weights, optimizer state and step count (two steps after the reload
    equal the two without it, bit for bit)."""
    assert not mine["diverged"] and mine["steps"] == ref["steps"] == FEW_STEPS
    assert mine["losses"][0] == pytest.approx(ref["losses"][0], abs=1e-4)
    assert np.allclose(mine["losses"], ref["losses"], rtol=1e-3)
    assert [e[0] for e in mine["evals"]] == [FEW_EVAL_EVERY, FEW_STEPS]
    assert mine["final_metric"] == pytest.approx(ref["final_metric"], abs=0.05)
    assert 0 <= mine["data_wait_share"] < 1 and max(mine["peak_rss_mb_ranks"]) > 0
    ck = mine["checkpoint"]
    assert ck["reload_identical"] is True and ck["steps_compared"] == 2 and ck["size_mb"] > 0
