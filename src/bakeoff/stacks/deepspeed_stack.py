"""`deepspeed`: one rank of DeepSpeed ZeRO stage 2 (gradients and optimizer state
sharded over the ranks), on DeepSpeed's CPU accelerator over gloo when there is
no GPU. The eager model and the reference's optimizer (its state in FP32) are
handed to `deepspeed.initialize`; each rank steps on its share of the global
batch through the engine's `backward` and `step`.

On first use DeepSpeed compiles its CPU communication op with the system's C++
compiler (about 40 s on 2 cores) into torch's extensions folder, then reuses it.
Its checkpoints are its own (`save_checkpoint` / `load_checkpoint`, one folder),
read back by DeepSpeed's loader, which unpickles in full: only the file this run
just wrote is ever read that way. Its communication is not timed (no hook)."""

from __future__ import annotations

import os
from typing import Any

from bakeoff.stacks.ddp import RankShare

ZERO_STAGE = 2
_TAG = "bakeoff"


class DeepSpeedTrainer(RankShare):
    checkpoint_format = f"DeepSpeed checkpoint (ZeRO stage {ZERO_STAGE}, a folder)"
    comm_ns = None  # not timed

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        import torch

        if not torch.cuda.is_available():
            # Chosen before DeepSpeed is imported: it picks its accelerator then.
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        config = {
            "train_batch_size": spec.batch_size,
            "train_micro_batch_size_per_gpu": self.share,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": ZERO_STAGE},
            "steps_per_print": 2**31 - 1,  # nothing of its own on the terminal
        }
        self.engine, _, _, _ = deepspeed.initialize(
            model=self.model, optimizer=self.optimizer, config=config
        )
        self.forward = self.engine
        self.settings.update(
            framework=f"deepspeed {deepspeed.__version__}",
            zero_stage=ZERO_STAGE,
            accelerator=deepspeed.get_accelerator().device_name(),
        )

    def param_groups(self) -> list[dict[str, Any]]:
        # The ZeRO optimizer the engine steps, around ours.
        return self.engine.optimizer.param_groups

    def step(self, prepared: tuple[Any, Any]) -> float:
        x, y = prepared
        self.next_lr()
        with self.torch.enable_grad():
            loss = self._loss(x, y)
            self.engine.backward(loss)
            self.engine.step()
        return float(loss.detach())

    def save(self, path: str) -> None:
        self.engine.save_checkpoint(path, tag=_TAG, client_state={"updates": self.updates})

    def load(self, path: str) -> None:
        _, client = self.engine.load_checkpoint(path, tag=_TAG)
        self.updates = int(client["updates"])
