"""`deepspeed`: one rank of DeepSpeed ZeRO stage 2 (gradients and optimizer state
sharded over the ranks), on DeepSpeed's CPU accelerator over gloo when there is
no GPU. The eager model and the reference's optimizer (its state in FP32) are
handed to `deepspeed.initialize`; each rank steps on its share of the global
batch through the engine's `backward` and `step`.

On a CPU, DeepSpeed's communication backend compiles its shared-memory all-reduce
op with the system's C++ compiler when it starts (about 40 s on 2 cores, on first
use). Training never calls that op: ZeRO's all-reduces and reduce-scatters go
through torch.distributed (gloo) either way, and the op serves only DeepSpeed's
`inference_all_reduce`. So it is not built here (`_without_shm_op`), and the
settings say so.
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

        if not torch.cuda.is_available():
            _without_shm_op()
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
        if not torch.cuda.is_available():
            self.settings["shm_comm_op"] = "not built: training communicates through gloo"

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


def _without_shm_op() -> None:
    """DeepSpeed's backend starts without its CPU shared-memory op (see the module's
    docstring): `TorchBackend` looks `build_shm_op` up when it is made, and None is
    what it gets where the op cannot be built, a case it handles. Taken from
    sys.modules: `deepspeed.comm`'s own name `torch` is PyTorch, which `import
    deepspeed.comm.torch as ...` would bind."""
    import importlib
    import sys

    importlib.import_module("deepspeed.comm.torch")
    backend: Any = sys.modules["deepspeed.comm.torch"]
    backend.build_shm_op = lambda: None
