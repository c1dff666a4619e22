"""The recipe's model defined again in Keras 3 and in Flax, for the stacks that do not
run PyTorch, with the PyTorch seed checkpoint's weights carried over exactly.

The Keras and JAX stacks must start from the very weights every PyTorch stack loads
(the seed's safetensors file), so a twin says how each tensor maps:

- convolutions: PyTorch's OIHW kernels become HWIO (channels-last);
- dense layers: PyTorch's (out, in) matrices are transposed to (in, out);
- the first dense layer after a flatten: PyTorch flattens (C, H, W), channels-last
  frameworks flatten (H, W, C), so its input rows are reordered;
- the images themselves go channels-last, once, when the data is read.

With those the twin's first loss is the reference's to FP32 rounding, which the
first-loss gate checks before anything is timed. A recipe whose model has no twin
here cannot run on those stacks; they say so and the others run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

DIGITS = "bakeoff.builtins.digits:untrained"


@dataclass(frozen=True)
class Twin:
    keras_model: Callable[[Any], Any]  # keras module -> an untrained Sequential
    flax_module: Callable[[], Any]  # -> a flax.linen Module
    keras_weights: Callable[[dict[str, np.ndarray]], list[np.ndarray]]  # get_weights() order
    flax_params: Callable[[dict[str, np.ndarray]], dict[str, Any]]
    images: Callable[[np.ndarray], np.ndarray]  # the recipe's inputs, as the twin takes them


def _digits_keras(keras: Any) -> Any:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),  # logits
        ],
        name="digits_cnn",
    )


def _digits_flax() -> Any:
    import flax.linen as nn

    class DigitsCNN(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Conv(16, (3, 3), padding="SAME", name="conv1")(x))
            x = nn.relu(nn.Conv(32, (3, 3), padding="SAME", name="conv2")(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(64, name="fc1")(x))
            return nn.Dense(10, name="fc2")(x)

    return DigitsCNN()


def _digits_arrays(state: dict[str, np.ndarray]) -> list[np.ndarray]:
    """kernel, bias of each layer with weights, channels-last, in layer order."""

    def conv(w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(w.transpose(2, 3, 1, 0))  # OIHW -> HWIO

    # fc1 reads a (32, 4, 4) map flattened by PyTorch as (C, H, W); the twin's flatten
    # gives (H, W, C): the same weights, rows reordered.
    fc1 = state["6.weight"].reshape(64, 32, 4, 4).transpose(2, 3, 1, 0).reshape(512, 64)
    return [
        conv(state["0.weight"]),
        state["0.bias"],
        conv(state["2.weight"]),
        state["2.bias"],
        np.ascontiguousarray(fc1),
        state["6.bias"],
        np.ascontiguousarray(state["8.weight"].T),
        state["8.bias"],
    ]


def _digits_flax_params(state: dict[str, np.ndarray]) -> dict[str, Any]:
    a = _digits_arrays(state)
    names = ("conv1", "conv2", "fc1", "fc2")
    return {n: {"kernel": a[2 * i], "bias": a[2 * i + 1]} for i, n in enumerate(names)}


def _channels_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # N,C,H,W -> N,H,W,C


TWINS = {
    DIGITS: Twin(
        keras_model=_digits_keras,
        flax_module=_digits_flax,
        keras_weights=_digits_arrays,
        flax_params=_digits_flax_params,
        images=_channels_last,
    )
}


def twin(factory: str) -> Twin | None:
    return TWINS.get(factory)


def missing(factory: str, stack: str) -> str | None:
    """Why `stack` cannot train the recipe's model (None when it can)."""
    if factory in TWINS:
        return None
    return (
        f"{stack} trains the model defined again in its own framework, with the PyTorch "
        f"seed weights carried over; bakeoff has that twin for the built-in digits CNN "
        f"({DIGITS}) only, not for {factory}"
    )


def xla_threads(threads: int) -> dict[str, Any]:
    """JAX on the CPU with `threads` threads, set before jax is first imported. XLA
    has no thread count beyond one or its own pool, sized by the CPUs the process
    may run on: with more than one thread but fewer than those CPUs, the process is
    pinned to `threads` of them, so the pool is the size every other stack gets."""
    import os

    from bakeoff.jax_platform import set_platform

    applied = set_platform("cpu", threads)
    allowed = sorted(os.sched_getaffinity(0))
    if 1 < threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
        applied["cpus"] = allowed[:threads]
    applied["xla_threads"] = applied.pop("threads")
    applied["threads"] = threads
    return applied


def load_data(path: str, twin: Twin, labels: Any) -> tuple[np.ndarray, ...]:
    """x_train, y_train, x_val, y_val from the run's data file, the images as the
    twin takes them and the labels of dtype `labels`."""
    data = np.load(path, allow_pickle=False)
    return (
        twin.images(np.asarray(data["x_train"], dtype=np.float32)),
        np.asarray(data["y_train"], dtype=labels),
        twin.images(np.asarray(data["x_val"], dtype=np.float32)),
        np.asarray(data["y_val"], dtype=labels),
    )


def load_state(path: str) -> dict[str, np.ndarray]:
    """The seed's PyTorch initial weights as NumPy arrays (no PyTorch needed)."""
    from safetensors.numpy import load_file

    return load_file(path)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy of logits against integer labels, in float64 (the
    gate's first loss, computed the same way for every non-PyTorch stack)."""
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean())
