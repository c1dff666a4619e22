"""Training stacks: what a training candidate runs in its worker.

Each stack trains the same recipe from the same initial weights, on the same data
order per seed, with the same optimizer (state in FP32) and threads; what differs
is how the step runs. A stack's `Trainer` is built in the worker from a
`bakeoff.trials.jobs.TrainSpec`:

- `rows` is how many training rows the data has (the seed's order draws from them);
- `prepare(indices)` turns a batch's row indices into the stack's own inputs
  (timed with the step, as a training loop takes its next batch);
- `step(prepared)` is one optimizer step over the global batch and returns its
  loss (taken before the update); it is the only thing timed;
- `initial_loss(prepared)` is the loss of the weights as they are, in eval mode
  and without an update (the gate's check that every stack starts alike);
- `evaluate()` gives the validation metric;
- `save(path)` / `load(path)` write and read the model and optimizer state.

The torch family lives in `torch_stacks`; `ddp` (one rank of DistributedDataParallel,
started by torchrun) in `ddp`; `fsdp` (FSDP2's `fully_shard`) in `fsdp`;
`deepspeed` (ZeRO) in `deepspeed_stack`; the Keras backends in `keras_stack` and
Flax with optax in `jax_stack`, both on the model's twin (`twins`); Lightning,
whose `Trainer.fit` owns the loop, is a driver of its own in `lightning_stack`. A
stack with `processes` above 1 runs in ranks that `bakeoff.distributed.ranks`
starts and drives; each rank builds the stack's trainer (or driver) for its share
of the global batch. Heavy libraries are imported inside the module that needs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Trainer(Protocol):
    settings: dict[str, Any]  # what the stack applied: threads, precision, compile, ...
    rows: int

    def prepare(self, indices: Any) -> Any: ...

    def step(self, prepared: Any) -> float: ...

    def initial_loss(self, prepared: Any) -> float: ...

    def evaluate(self) -> float: ...

    def save(self, path: str) -> None: ...

    def load(self, path: str) -> None: ...


@dataclass(frozen=True)
class StackInfo:
    name: str
    description: str
    # Processes it trains in: above 1, ranks under torchrun, the threads split
    # evenly among them (equal threads in all for every stack).
    processes: int = 1
    # Started by torchrun even in 1 process (its scaling references run so).
    launched: bool = False
    # With a Ray cluster (`bakeoff train --cluster`), it trains one rank a node there
    # through Ray Train's TorchTrainer (`bakeoff.distributed.nodes`).
    across_nodes: bool = False
    # The package of the framework it trains with (`bakeoff env` shows its version).
    package: str = "torch"


STACKS = (
    StackInfo("torch", "PyTorch eager, the reference"),
    StackInfo("torch-compile", "torch.compile (inductor); compile time reported apart"),
    StackInfo("torch-bf16", "PyTorch eager under BF16 autocast"),
    StackInfo("torch-accumulate", "PyTorch eager, half the micro-batch, two accumulation steps"),
    StackInfo(
        "ddp",
        "DistributedDataParallel, 2 processes under torchrun, gloo (NCCL on a GPU); with "
        "--cluster, one rank on each node through Ray Train's TorchTrainer",
        processes=2,
        launched=True,
        across_nodes=True,
    ),
    StackInfo(
        "fsdp",
        "FSDP2 fully_shard, 2 processes under torchrun, gloo (experimental on a CPU)",
        processes=2,
        launched=True,
    ),
    StackInfo(
        "deepspeed",
        "DeepSpeed ZeRO stage 2, 2 processes under torchrun (its CPU accelerator, gloo)",
        processes=2,
        launched=True,
        package="deepspeed",
    ),
    StackInfo("lightning", "Lightning Trainer.fit, 1 process", package="lightning"),
    StackInfo(
        "keras-jax",
        "Keras 3 on JAX, train_on_batch (fit's train function, jitted)",
        package="keras",
    ),
    StackInfo(
        "keras-tensorflow",
        "Keras 3 on TensorFlow, train_on_batch (fit's tf.function)",
        package="keras",
    ),
    StackInfo(
        "keras-torch",
        "Keras 3 on PyTorch, train_on_batch (fit's train function, eager)",
        package="keras",
    ),
    StackInfo("jax", "Flax (linen) and optax under jax.jit", package="flax"),
    StackInfo("full", "PyTorch eager, every weight trained (full fine-tuning, a reference)"),
    StackInfo(
        "lora",
        "PyTorch eager with peft's LoRA adapters; only they (and a head) train",
        package="peft",
    ),
    StackInfo(
        "fastai",
        "fastai's Learner.fit, 1 process (the torch model and optimizer)",
        package="fastai",
    ),
    StackInfo(
        "lightning-ddp",
        "Lightning Trainer.fit with the DDP strategy, 2 processes under torchrun (our entry "
        "script), gloo",
        processes=2,
        launched=True,
        package="lightning",
    ),
)
LIGHTNING = ("lightning", "lightning-ddp")
KERAS = ("keras-jax", "keras-tensorflow", "keras-torch")
# The stacks that train the model's twin in another framework (`twins`).
TWINNED = (*KERAS, "jax")

BY_NAME = {s.name: s for s in STACKS}
NAMES = tuple(s.name for s in STACKS)
REFERENCE = "torch"
# Fine-tuning recipes compare these two, full fine-tuning the reference; every
# other recipe runs the rest (full would be torch again, lora needs its adapters).
FINE_TUNING = ("full", "lora")
DEFAULT_STACKS = tuple(n for n in NAMES if n not in FINE_TUNING)


def model_factory(ref: str, folder: str) -> Any:
    """The recipe's "module:callable" that builds the untrained model; a user's module
    is found in the workload's folder first. A module of the same name imported from
    another folder (an earlier recipe in this process) never stands in for it: its
    model would have other layers than the one the workers build."""
    from bakeoff.source import import_factory, on_path

    make = import_factory(ref, folder or None, "the training recipe", "model.factory")
    if not folder:
        return make

    def build() -> Any:
        # the factory may import the folder's helpers as it builds
        with on_path(folder):
            return make()

    return build


def batches(rows: int, batch_size: int, seed: int) -> Iterator[np.ndarray]:
    """The seed's data order, the same for every stack: each epoch a permutation of
    the training rows drawn from (seed, epoch), cut into full global batches."""
    if batch_size > rows:
        raise ValueError(
            f"the global batch ({batch_size}) is larger than the training set ({rows})"
        )
    epoch = 0
    while True:
        order = np.random.default_rng([seed, epoch]).permutation(rows)
        for start in range(0, rows - batch_size + 1, batch_size):
            yield order[start : start + batch_size]
        epoch += 1


def availability(name: str, factory: str = "", probe: bool = True) -> str | None:
    """None when the stack can run here on the recipe's model (`factory`), otherwise
    why not and how to get it. Without `probe`, from what is installed alone: no
    framework is imported (`bakeoff env` lists the stacks so)."""
    if name not in NAMES:
        return f"no training stack {name!r} (stacks: {', '.join(NAMES)})"
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "needs PyTorch: pip install 'bakeoff'"
    if name == "fastai" and importlib.util.find_spec("fastai") is None:
        return (
            "needs fastai: make fastai (pip install 'bakeoff[fastai]' and then pip "
            "install --no-deps fastai==2.8.12: the torchvision it would pull in is built "
            "for CUDA torch and does not load beside the CPU one)"
        )
    if name in LIGHTNING and importlib.util.find_spec("lightning") is None:
        return "needs Lightning: pip install 'bakeoff[train]'"
    if name == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        return "needs DeepSpeed: pip install 'bakeoff[train]'"
    if name == "lora" and importlib.util.find_spec("peft") is None:
        return "needs peft: pip install 'bakeoff[train]'"
    if name in TWINNED:
        needs = ("keras", "jax") if name in KERAS else ("jax", "flax", "optax")
        if name == "keras-tensorflow":
            needs = ("keras", "tensorflow")
        absent = [m for m in needs if importlib.util.find_spec(m) is None]
        if absent:
            return f"needs {', '.join(absent)}: pip install 'bakeoff[frameworks]'"
        from bakeoff.stacks import twins

        return twins.missing(factory, name) if factory else None
    if BY_NAME[name].launched and probe:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_gloo_available()):
            return "this PyTorch build has no torch.distributed with gloo"
    return None
