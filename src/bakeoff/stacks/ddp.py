"""`ddp`: one rank of PyTorch DistributedDataParallel. torchrun starts the ranks
(`bakeoff.distributed.ranks`), each builds this trainer once the process group is
up: the eager model from the seed's initial weights, wrapped in DDP, stepping on
its contiguous share of every global batch. DDP averages the gradients over the
ranks, so with equal shares a step is the reference's step on the whole batch.

How long the gradients' all-reduce is in flight is timed through a DDP
communication hook that does what DDP's default does (an asynchronous all-reduce,
then the average) and notes when each bucket's reduction starts and ends."""

from __future__ import annotations

import time
from typing import Any

from bakeoff.stacks.torch_stacks import TorchTrainer


class RankShare(TorchTrainer):
    """The eager trainer in one rank: it steps on its contiguous share of every
    global batch (the batch must split evenly, so the averaged gradients are the
    whole batch's)."""

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        import torch.distributed as dist

        self.dist = dist
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        if spec.batch_size % self.world:
            raise ValueError(
                f"the global batch ({spec.batch_size}) does not split evenly over "
                f"{self.world} processes"
            )
        self.share = spec.batch_size // self.world
        self.settings.update(
            processes=self.world,
            micro_batch=self.share,
            backend=dist.get_backend(),
            launcher="torchrun",
        )

    def prepare(self, indices: Any) -> tuple[Any, Any]:
        mine = indices[self.rank * self.share : (self.rank + 1) * self.share]
        return super().prepare(mine)


class DDPTrainer(RankShare):
    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        from torch.nn.parallel import DistributedDataParallel

        self.forward = DistributedDataParallel(self.model)
        self.comm_ns = 0  # the all-reduce's time in flight, summed over buckets
        self.forward.register_comm_hook(self, timed_allreduce)

    def save(self, path: str) -> None:
        # The ranks hold the same weights and optimizer state: rank 0 writes them.
        # Across a cluster's nodes every rank writes its own copy into its node's
        # folder (`path` is each rank's own there), since no rank reads another
        # machine's files.
        if self.rank == 0 or self.spec.cluster_address:
            super().save(path)
        self.dist.barrier()


def timed_allreduce(state: Any, bucket):
    """DDP's default all-reduce (asynchronous, then the average over the ranks),
    adding its time in flight to `state.comm_ns` (`state` has `dist` and `world`).
    `bucket` and the result carry no annotation: DDP refuses a hook whose
    annotations are not its own types, and with postponed annotations they are
    strings."""
    dist = state.dist
    started = time.perf_counter_ns()
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def average(done: Any) -> Any:
        state.comm_ns += time.perf_counter_ns() - started
        return done.value()[0].div_(state.world)

    return future.then(average)
