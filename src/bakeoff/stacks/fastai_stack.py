"""`fastai`: the recipe through fastai's `Learner.fit`.

fastai owns the training loop, so, as for Lightning (`lightning_stack`), this stack
is a driver of its own: `fit` runs in a thread of the worker and a callback parks
it between steps until the driver asks for more (`stacks.parking`). Every step
inside a block runs in fastai's own loop, callbacks and all.

The model, its initial weights, the optimizer (wrapped as it is in fastai's
`OptimWrapper`), the learning-rate schedule and the data order are the torch
reference's (`TorchTrainer`, eager). The loader yields each step's rows of the
seed's order, taken from memory as our own loop takes them; fastai fetches a batch
only when the step before has ended, so that fetch is the step's data wait.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np
import torch

from bakeoff import stacks
from bakeoff.stacks.parking import Parking, check_alive
from bakeoff.stacks.steps import CHECKPOINT_STEPS, Steps, checkpoint_figures
from bakeoff.stacks.torch_stacks import TorchTrainer

# fastai's epoch has a length; the seed's order has none. One "epoch" of this many
# steps is more than any run takes, so fastai never starts a second (or validates).
_STEPS_PER_EPOCH = 10**9


class _Batches(torch.utils.data.IterableDataset):
    """Each step's (x, y): the seed's global batches, or the ones the checkpoint check
    asks to take again (`replay`); the last few are kept in `recent`."""

    def __init__(self, inner: TorchTrainer, batch_size: int, seed: int) -> None:
        super().__init__()
        self.inner = inner
        self.order = stacks.batches(inner.rows, batch_size, seed)
        self.replay: list[np.ndarray] = []
        self.recent: collections.deque[np.ndarray] = collections.deque(maxlen=CHECKPOINT_STEPS)

    def __len__(self) -> int:
        return _STEPS_PER_EPOCH

    def __iter__(self) -> Any:
        while True:
            rows = self.replay.pop(0) if self.replay else next(self.order)
            self.recent.append(rows)
            yield self.inner.prepare(rows)


class FastaiDriver:
    processes = 1

    def __init__(self, spec: Any) -> None:
        import fastai
        from fastai.data.core import DataLoaders
        from fastai.learner import Learner
        from fastai.optimizer import OptimWrapper

        self.spec = spec
        self.inner = TorchTrainer(spec)
        self.rows = self.inner.rows
        self.batches = _Batches(self.inner, spec.batch_size, spec.seed)
        loaders = DataLoaders(
            torch.utils.data.DataLoader(self.batches, batch_size=None),
            torch.utils.data.DataLoader([], batch_size=None),  # never reached
        )
        from fastai.callback.core import CancelFitException

        self.gate = Parking(CancelFitException)
        self.learner = Learner(
            loaders,
            self.inner.model,
            loss_func=torch.nn.functional.cross_entropy,
            opt_func=OptimWrapper(opt=self.inner.optimizer),
            cbs=[_gate(self.inner, self.gate)],
        )
        self.settings: dict[str, Any] = {
            **self.inner.settings,
            "framework": f"fastai {fastai.__version__}",
            "loop": "Learner.fit",
        }
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._fit, daemon=True)
        self.thread.start()
        self.gate.wait_parked(self._alive)  # fastai's setup done, before the first step

    def _fit(self) -> None:
        from fastai.callback.core import CancelFitException

        try:
            self.learner.fit(1)
        except CancelFitException:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.gate.finished()

    def _alive(self) -> None:
        check_alive("fastai's fit", self.error, self.thread)

    def steps(self, n: int) -> Steps:
        return self.gate.steps(n, self._alive)

    def initial_loss(self) -> float:
        first = next(stacks.batches(self.rows, self.spec.batch_size, self.spec.seed))
        return self.inner.initial_loss(self.inner.prepare(first))

    def evaluate(self) -> float:
        return self.inner.evaluate()

    def checkpoint(self, path: str) -> dict[str, Any]:
        """fastai's own checkpoint (`save_model` with the optimizer's state, as
        `Learner.save` writes it), then the next steps; the weights, the optimizer's
        state, the schedule's place and the RNG loaded back, and those steps again."""
        from fastai.learner import save_model

        updates, rng = self.inner.updates, torch.get_rng_state()
        t0 = time.perf_counter()
        save_model(path, self.learner.model, self.learner.opt, with_opt=True)
        save_s = time.perf_counter() - t0
        self.batches.recent.clear()
        before = self.steps(CHECKPOINT_STEPS).losses
        t0 = time.perf_counter()
        # Our own file, written just now; still read the safe way.
        state = torch.load(path, weights_only=True)
        self.learner.model.load_state_dict(state["model"])
        self.learner.opt.load_state_dict(state["opt"])
        self.inner.updates = updates  # where the schedule was when it was saved
        torch.set_rng_state(rng)
        load_s = time.perf_counter() - t0
        self.batches.replay = list(self.batches.recent)
        after = self.steps(CHECKPOINT_STEPS).losses
        form = "fastai checkpoint (save_model: the model's and the optimizer's state)"
        return checkpoint_figures(path, save_s, load_s, before, after, form)

    def communication_ns(self) -> int | None:
        return 0  # one process: nothing to communicate

    def close(self) -> None:
        self.gate.stop()
        self.thread.join(timeout=60)


def _gate(inner: TorchTrainer, parking: Parking) -> Any:
    """fastai's callback that parks `fit` between steps (`parking`) and times them; it
    sets the schedule's rate on the optimizer before each update, as our own loop
    does. The parking is held, not inherited: a fastai callback warns on every
    attribute it shares with the learner (`loss`)."""
    from fastai.callback.core import Callback

    class Gate(Callback):
        order = 0  # before fastai's own callbacks: the clock starts first

        def before_train(self) -> None:
            parking.park()

        def before_batch(self) -> None:
            parking.fetched()
            inner.next_lr()

        def after_batch(self) -> None:
            parking.loss = float(self.learn.loss.detach())
            parking.step_ended()

    return Gate()
