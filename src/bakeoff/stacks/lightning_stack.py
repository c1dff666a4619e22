"""`lightning` and `lightning-ddp`: the recipe through Lightning's `Trainer.fit`.

Lightning owns the training loop, so this stack is a driver of its own rather
than a `Trainer` our loop steps: `fit` runs in a thread of the worker (or of each
rank, for `lightning-ddp` under torchrun, where Lightning finds torchrun's
environment and launches nothing itself), and a callback parks it between steps
until the driver asks for more. Every step inside a block runs back to back in
Lightning's own loop, hooks and all: that is the stack being measured. A step's
time runs from the end of the one before (or the release) to the end of its own
`on_train_batch_end`; the clock never includes the parked wait.

The model, its initial weights, the optimizer and the data order are the torch
reference's (`TorchTrainer`, eager): the LightningModule wraps them. The data
loader yields each step's row indices (the rank's share of the global batch), and
the step takes its rows from memory as our own loop does, timed as the data wait.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from bakeoff import stacks
from bakeoff.stacks.parking import Parking, check_alive
from bakeoff.stacks.steps import CHECKPOINT_STEPS, Steps, checkpoint_figures
from bakeoff.stacks.torch_stacks import TorchTrainer


class _Stop(Exception):
    """Raised in the fit thread by the parked callback when the driver closes."""


class LightningDriver:
    def __init__(self, spec: Any) -> None:
        import lightning as L

        self.spec = spec
        self.inner = TorchTrainer(spec)
        self.rows = self.inner.rows
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.world = torch.distributed.get_world_size() if distributed else 1
        self.rank = torch.distributed.get_rank() if distributed else 0
        self.processes = 1  # what the worker sees of this driver (ranks are the group's)
        if spec.batch_size % self.world:
            raise ValueError(
                f"the global batch ({spec.batch_size}) does not split evenly over "
                f"{self.world} processes"
            )
        self.share = spec.batch_size // self.world
        self.clock = _CommClock(torch.distributed if distributed else None, self.world)
        self.gate = _Gate(self.clock if distributed else None)
        self.module = _module(L, self.inner, self.gate)
        strategy: Any = "auto"
        if distributed:
            from lightning.pytorch.strategies import DDPStrategy

            # Lightning registers a `ddp_comm_hook` on CUDA only; the gate registers
            # the timed all-reduce itself, once the strategy has wrapped the model.
            strategy = DDPStrategy(process_group_backend="gloo")
        self.trainer = L.Trainer(
            accelerator="cpu",
            devices=self.world,
            strategy=strategy,
            max_epochs=-1,
            max_steps=-1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            use_distributed_sampler=False,
            callbacks=[self.gate],
        )
        self.settings: dict[str, Any] = {
            **self.inner.settings,
            "framework": f"lightning {L.__version__}",
            "loop": "Trainer.fit",
        }
        if distributed:
            self.settings.update(
                processes=self.world,
                micro_batch=self.share,
                backend="gloo",
                launcher="torchrun",
                strategy="ddp",
            )
        loader = torch.utils.data.DataLoader(
            _Order(self.rows, spec.batch_size, spec.seed, self.rank, self.share),
            batch_size=None,
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._fit, args=(loader,), daemon=True)
        self.thread.start()
        self.gate.wait_parked(self._alive)  # Lightning's setup done, before the first step

    def _fit(self, loader: Any) -> None:
        try:
            self.trainer.fit(self.module, train_dataloaders=loader)
        except _Stop:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.gate.finished()

    def _alive(self) -> None:
        check_alive("Lightning's fit", self.error, self.thread)

    def steps(self, n: int) -> Steps:
        return self.gate.steps(n, self._alive)

    def initial_loss(self) -> float:
        first = next(stacks.batches(self.rows, self.spec.batch_size, self.spec.seed))
        mine = first[self.rank * self.share : (self.rank + 1) * self.share]
        return self.inner.initial_loss(self.inner.prepare(mine))

    def evaluate(self) -> float:
        return self.inner.evaluate()

    def checkpoint(self, path: str) -> dict[str, Any]:
        """Lightning's own checkpoint (`Trainer.save_checkpoint`), then the next steps;
        its weights and optimizer state loaded back, and those same steps again."""
        import torch

        t0 = time.perf_counter()
        self.trainer.save_checkpoint(path)
        save_s = time.perf_counter() - t0
        self.module.recent.clear()
        before = self.steps(CHECKPOINT_STEPS).losses
        t0 = time.perf_counter()
        # Our own file, written just now; still read the safe way.
        state = torch.load(path, weights_only=True)
        self.module.load_state_dict(state["state_dict"])
        self.trainer.optimizers[0].load_state_dict(state["optimizer_states"][0])
        # Where the schedule was: the loop's optimizer steps when it was saved.
        self.inner.updates = int(state["global_step"])
        load_s = time.perf_counter() - t0
        self.module.replay = list(self.module.recent)
        after = self.steps(CHECKPOINT_STEPS).losses
        form = "Lightning checkpoint (Trainer.save_checkpoint)"
        return checkpoint_figures(path, save_s, load_s, before, after, form)

    def communication_ns(self) -> int | None:
        return self.clock.comm_ns

    def close(self) -> None:
        self.gate.stop()
        self.thread.join(timeout=60)


class _CommClock:
    """The state DDP's communication hook gets: where it adds its time in flight."""

    def __init__(self, dist: Any, world: int) -> None:
        self.dist, self.world, self.comm_ns = dist, world, 0


class _Order(torch.utils.data.IterableDataset):
    """Each step's row indices, the rank's share of the seed's global batches: an
    iterable the data loader hands on as they are (batch_size=None). It shards
    itself, so Lightning adds no sampler of its own."""

    def __init__(self, rows: int, batch_size: int, seed: int, rank: int, share: int) -> None:
        super().__init__()
        self.rows, self.batch_size, self.seed = rows, batch_size, seed
        self.rank, self.share = rank, share

    def __iter__(self) -> Any:
        for batch in stacks.batches(self.rows, self.batch_size, self.seed):
            yield np.ascontiguousarray(batch[self.rank * self.share : (self.rank + 1) * self.share])


def _module(L: Any, inner: TorchTrainer, gate: _Gate) -> Any:
    class RecipeModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = inner.model
            self.replay: list[Any] = []  # rows to take again instead of the loader's
            self.recent: collections.deque[Any] = collections.deque(maxlen=CHECKPOINT_STEPS)

        def training_step(self, rows: Any, batch_idx: int) -> Any:
            t0 = time.perf_counter_ns()
            if self.replay:
                rows = self.replay.pop(0)
            self.recent.append(rows)
            x, y = inner.x_train[rows], inner.y_train[rows]
            gate.data_ns += time.perf_counter_ns() - t0
            inner.next_lr()  # the schedule's rate for the update Lightning takes next
            loss = inner._loss(x, y)
            gate.loss = float(loss.detach())
            return loss

        def configure_optimizers(self) -> Any:
            return inner.optimizer

    return RecipeModule()


class _Gate(Callback, Parking):
    """Parks `fit` between steps: the driver grants steps, the callback times them."""

    def __init__(self, comm: _CommClock | None) -> None:
        Callback.__init__(self)
        Parking.__init__(self, _Stop)
        self.comm = comm

    def on_train_start(self, trainer: Any, module: Any) -> None:
        if self.comm is not None:
            from torch.nn.parallel import DistributedDataParallel

            from bakeoff.stacks.ddp import timed_allreduce

            wrapped = trainer.strategy.model
            if not isinstance(wrapped, DistributedDataParallel):
                raise TypeError(f"Lightning's DDP strategy gave a {type(wrapped).__name__}")
            wrapped.register_comm_hook(self.comm, timed_allreduce)
        self.park()

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
        self.fetched()  # the loader's part of the data wait

    def on_train_batch_end(
        self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        self.step_ended()
