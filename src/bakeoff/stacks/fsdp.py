"""`fsdp`: one rank of PyTorch FSDP2 (`fully_shard`) over gloo on a CPU mesh.

Each layer with weights is its own FSDP unit, then the root: parameters, their
gradients and the optimizer state are sharded over the ranks (the memory this
stack exists to save), gathered for each forward and backward, and the
gradients reduce-scattered as their average. On a CPU this path is experimental
in PyTorch: the stack is measured for correctness (the first loss, the final
metric, the checkpoint) and memory as much as for speed.

Checkpoints are PyTorch's distributed checkpoint (DCP): every rank writes its
own shards into one folder, and loads them back in place. FSDP2 has no
communication hook to time its collectives with, so no communication share is
given (DDP's is timed through its hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakeoff.stacks.ddp import RankShare


class FSDPTrainer(RankShare):
    checkpoint_format = "torch.distributed.checkpoint (DCP), each rank its own shards"
    comm_ns = None  # not timed: see the module's docstring

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (self.world,))
        units = [m for m in self.model.children() if any(True for _ in m.parameters())]
        for unit in units:
            fully_shard(unit, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        # The sharded parameters are new tensors: the optimizer is made again over
        # them (nothing has stepped yet, so no state is lost).
        optimizer = getattr(torch.optim, self.settings["optimizer"])
        self.optimizer = optimizer(self.model.parameters(), lr=spec.lr)
        self.forward = self.model
        self.settings.update(sharding="FSDP2 fully_shard", fsdp_units=len(units) + 1)

    def save(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        updates = self.torch.tensor(self.updates)
        state = {"model": model, "optimizer": optimizer, "updates": updates}
        dcp.save(state, checkpoint_id=Path(path))

    def load(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        state = {"model": model, "optimizer": optimizer, "updates": self.torch.tensor(0)}
        dcp.load(state, checkpoint_id=Path(path))  # in place, into these tensors
        self.updates = int(state["updates"])
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
