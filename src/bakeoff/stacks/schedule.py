"""The recipe's learning-rate schedule, one pure function of the update's number.

Every stack asks it for the rate of its next update and sets that on its own
optimizer before the update (PyTorch's param groups, Keras' learning-rate
variable, optax's injected hyperparameter), so all of them take the very same
rate at the same step, whatever each framework's own schedule classes would have
computed. The number of updates taken travels with every checkpoint, so a reload
resumes the schedule where it was.

- `constant`: the base rate throughout;
- `linear`: from the base rate down towards zero at the recipe's end;
- `cosine`: half a cosine from the base rate down towards zero at the end.

`warmup` updates come first, rising linearly to the base rate (the first at
base/warmup). No update inside the recipe is at rate 0 (a step that changes
nothing), and past its end (the checkpoint check's steps, long throughput rounds)
the last step's rate holds: at rate 0 the check after a reload could not see a
lost optimizer state, the update it shows would be none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class Schedule:
    base: float
    kind: str = "constant"
    warmup: int = 0  # updates rising to the base rate
    total: int = 0  # the recipe's steps: linear and cosine would reach zero after them

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"no learning-rate schedule {self.kind!r} (schedules: {KINDS})")
        needs_length = self.warmup > 0 or self.kind != "constant"
        if self.warmup < 0 or (needs_length and self.warmup >= self.total):
            raise ValueError(
                f"warm-up of {self.warmup} updates in a {self.kind} schedule over "
                f"{self.total}: it must be shorter than the recipe"
            )

    def at(self, update: int) -> float:
        """The rate of update number `update` (0 for the first)."""
        if update < self.warmup:
            return self.base * (update + 1) / self.warmup
        if self.kind == "constant":
            return self.base
        last = min(update, self.total - 1)  # past the recipe: its last step's rate
        progress = (last - self.warmup) / (self.total - self.warmup)
        if self.kind == "linear":
            return self.base * (1.0 - progress)
        return self.base * 0.5 * (1.0 + math.cos(math.pi * progress))

    def words(self) -> str:
        """What it is, for the settings and the report."""
        what = {
            "constant": f"constant {self.base:g}",
            "linear": f"linear from {self.base:g} towards 0 over {self.total} steps",
            "cosine": f"cosine from {self.base:g} towards 0 over {self.total} steps",
        }[self.kind]
        return what + (f", after {self.warmup} warm-up steps" if self.warmup else "")


def of(spec: Any) -> Schedule:
    """A `TrainSpec`'s schedule: its stack's base rate, the recipe's kind and length."""
    return Schedule(spec.lr, spec.schedule, spec.warmup_steps, spec.total_steps)
