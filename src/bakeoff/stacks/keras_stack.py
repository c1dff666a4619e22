"""The Keras 3 training stacks: `keras-jax`, `keras-tensorflow`, `keras-torch`.

The recipe's model is its Keras twin (`bakeoff.stacks.twins`) holding the seed's
PyTorch initial weights, compiled with the recipe's optimizer (state in FP32, the
hyperparameters PyTorch's defaults use) and sparse categorical cross-entropy on
logits, the mean over the batch as PyTorch's. Each step is `train_on_batch`, which
runs the very train function `fit` builds (`make_train_function`, jitted where the
backend compiles it), one global batch per call on the seed's data order; the first
call compiles, and the training side reports that apart as the first step's extra
time. The backend is set before keras is first imported in the worker, with its
threads: XLA's pool for JAX, TensorFlow's intra-op threads, PyTorch's threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.stacks import schedule, twins

BACKENDS = {"keras-jax": "jax", "keras-tensorflow": "tensorflow", "keras-torch": "torch"}
# PyTorch's defaults, so every stack runs the same update (Keras' own are
# epsilon 1e-7 for Adam, weight decay 0.004 for AdamW).
_OPTIMIZERS = {
    "adam": ("Adam", {"epsilon": 1e-8}),
    "adamw": ("AdamW", {"epsilon": 1e-8, "weight_decay": 0.01}),
    "sgd": ("SGD", {}),
}


def _threads(backend: str, threads: int) -> dict[str, Any]:
    """Set before keras (and its backend) is first imported; what was applied."""
    if backend == "jax":
        return twins.xla_threads(threads)
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        return {
            "threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        }
    import contextlib

    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # refused once parallel work ran
        torch.set_num_interop_threads(1)
    return {"threads": torch.get_num_threads()}


class KerasTrainer:
    checkpoint_format = "Keras' .weights.h5 of the model and its optimizer (save_weights)"
    checkpoint_suffix = ".weights.h5"  # Keras refuses a weights file named otherwise

    def __init__(self, spec: Any) -> None:
        twin = twins.twin(spec.factory)
        if twin is None:
            raise RuntimeError(twins.missing(spec.factory, spec.stack))
        backend = BACKENDS[spec.stack]
        applied = _threads(backend, spec.threads)
        from bakeoff.keras_models import set_keras_backend

        keras = set_keras_backend(backend)
        # Dropout and other random layers draw from the seed.
        keras.utils.set_random_seed(spec.seed)
        self.keras = keras
        self.x_train, self.y_train, self.x_val, self.y_val = twins.load_data(
            spec.data_path, twin, np.int64
        )
        self.rows = len(self.y_train)
        self.model = twin.keras_model(keras)
        self.model.set_weights(twin.keras_weights(twins.load_state(spec.init_path)))
        name, kwargs = _OPTIMIZERS[spec.optimizer]
        self.model.compile(
            optimizer=getattr(keras.optimizers, name)(learning_rate=spec.lr, **kwargs),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        # Built now, so the optimizer's variables exist for a checkpoint before the
        # first step, and the first step's time is its compile and its update only.
        self.model.optimizer.build(self.model.trainable_variables)
        self.schedule = schedule.of(spec)
        self.updates = 0  # restored from the optimizer's iteration count on a load
        self.settings: dict[str, Any] = {
            **applied,
            "keras_backend": keras.backend.backend(),
            "keras_version": keras.__version__,
            "optimizer": name,
            "optimizer_state": "float32",
            "lr": spec.lr,
            "lr_schedule": self.schedule.words(),
            "global_batch": spec.batch_size,
            "precision": "fp32",
            "step": "train_on_batch (the train function fit builds, one batch per call)",
            "jit_compile": self.model.jit_compile,
            "trainable_parameters": int(
                sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)
            ),
        }
        # What the train function compiles with (keras-torch runs eagerly unless
        # Keras chose jit_compile, which is torch.compile there).
        compiler = {
            "jax": "XLA",
            "tensorflow": "tf.function with XLA" if self.model.jit_compile else "tf.function",
            "torch": "torch.compile" if self.model.jit_compile else None,
        }[backend]
        if compiler:
            self.settings["compile_backend"] = compiler

    def prepare(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        return self.x_train[idx], self.y_train[idx]

    def step(self, prepared: tuple[np.ndarray, np.ndarray]) -> float:
        x, y = prepared
        # The rate goes into the optimizer's learning-rate variable, which the train
        # function reads as state on every call (no recompile).
        self.model.optimizer.learning_rate = self.schedule.at(self.updates)
        self.updates += 1
        # An update with a loss that is not finite would leave NaN weights behind;
        # the training side stops the seed at that loss, so it is never used.
        return float(self.model.train_on_batch(x, y))

    def _logits(self, x: np.ndarray) -> np.ndarray:
        out = self.model(x, training=False)
        return np.asarray(self.keras.ops.convert_to_numpy(out))

    def initial_loss(self, prepared: tuple[np.ndarray, np.ndarray]) -> float:
        x, y = prepared
        return twins.cross_entropy(self._logits(x), y)

    def evaluate(self) -> float:
        correct = 0
        for start in range(0, len(self.x_val), 512):
            logits = self._logits(self.x_val[start : start + 512])
            correct += int((logits.argmax(1) == self.y_val[start : start + 512]).sum())
        return correct / len(self.x_val)

    def save(self, path: str) -> None:
        self.model.save_weights(path)

    def load(self, path: str) -> None:
        self.model.load_weights(path)
        self.updates = int(self.keras.ops.convert_to_numpy(self.model.optimizer.iterations))
