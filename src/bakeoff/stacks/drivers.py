"""Which driver runs a stack's steps in this process. Its own module, not the
package's: the drivers import the stacks' modules, and those import the package
(its `Trainer` protocol, `batches`), so the package must not import them back."""

from __future__ import annotations

from typing import Any

from bakeoff.stacks import LIGHTNING

__all__ = ["driver"]


def driver(spec: Any, in_ranks: bool = False) -> Any:
    """What runs the stack's steps in this process (a `steps.Driver`): our own loop
    around its `Trainer`, or, where the framework owns the loop, its own driver."""
    if spec.stack in LIGHTNING:
        from bakeoff.stacks import lightning_stack

        return lightning_stack.LightningDriver(spec)
    if spec.stack == "fastai":
        from bakeoff.stacks import fastai_stack

        return fastai_stack.FastaiDriver(spec)
    from bakeoff.stacks import steps

    return steps.LocalDriver(spec, stop_on_nan=not in_ranks)
