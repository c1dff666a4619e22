"""Which trainer a `TrainSpec` gets. Its own module, not the package's: each
trainer's module imports the package (its `Trainer` protocol, `model_factory`), so
the package must not import them back."""

from __future__ import annotations

from typing import Any

from bakeoff.stacks import KERAS, Trainer

__all__ = ["trainer"]


def trainer(spec: Any) -> Trainer:
    """The stack's trainer for a `TrainSpec` (in the worker, or in each rank of a
    launched stack, with the process group already up)."""
    if spec.stack == "ddp":
        from bakeoff.stacks import ddp

        return ddp.DDPTrainer(spec)
    if spec.stack == "fsdp":
        from bakeoff.stacks import fsdp

        return fsdp.FSDPTrainer(spec)
    if spec.stack == "deepspeed":
        from bakeoff.stacks import deepspeed_stack

        return deepspeed_stack.DeepSpeedTrainer(spec)
    if spec.stack in KERAS:
        from bakeoff.stacks import keras_stack

        return keras_stack.KerasTrainer(spec)
    if spec.stack == "jax":
        from bakeoff.stacks import jax_stack

        return jax_stack.JaxTrainer(spec)
    from bakeoff.stacks import torch_stacks

    return torch_stacks.TorchTrainer(spec)
