"""Where the samples are in each input: its batch axis, or none at all.

Most models take every input batched on axis 0. A stateful one may not: a
recurrent state is [layers, batch, hidden] (the batch on axis 1), and a sample
rate is one scalar for every call. A `Layout` says which axis of each input is
the batch; the inputs it names as constants have no batch and are fed
unchanged to every call. Everything that cuts samples out of the data (the
split, the timing pool, calibration, per-sample shapes) goes through it, so no
two places can disagree on where a sample is.

The run's data file (data.npz) keeps each batched input per split
(``quality/<name>``, ``pool/<name>``, ``calib/<name>``, ``quality_alt/<name>``)
in the input's own layout, each constant once as ``const/<name>``, and the batch
axis of each input whose batch is not on axis 0 as a 0-d ``batch_axis/<name>``:
the file describes itself, for readers that have no model source (export,
reports), and a workload without either key writes the same file as before.

A model's first output (what the quality gate compares) is taken as batched on
axis 0, whatever its inputs' layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CONST_PREFIX = "const/"
BATCH_AXIS_PREFIX = "batch_axis/"


@dataclass(frozen=True)
class Layout:
    """Batch axis per input (0 where not given); `constants` have none."""

    batch_axes: Mapping[str, int] = field(default_factory=dict)
    constants: tuple[str, ...] = ()

    @classmethod
    def of(cls, source: Any) -> Layout:
        """The layout a workload's ModelSource declares."""
        return cls(dict(source.batch_axes), tuple(source.constants))

    def axis(self, name: str) -> int | None:
        """The input's batch axis, or None for a constant."""
        if name in self.constants:
            return None
        return int(self.batch_axes.get(name, 0))

    def batched(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n not in self.constants]

    def count(self, arrays: Mapping[str, np.ndarray]) -> int:
        """Samples in `arrays`: the batch size of its first batched input."""
        for name, arr in arrays.items():
            axis = self.axis(name)
            if axis is not None:
                return int(np.shape(arr)[axis])
        raise ValueError(f"no batched input among {', '.join(arrays)} (all are constants)")

    def take(self, arrays: Mapping[str, np.ndarray], index: Any) -> dict[str, np.ndarray]:
        """The samples at `index` (indices or a slice) of every batched input, each
        along its own batch axis; constants as they are. Input order is kept: runtimes
        that feed by position rely on it."""
        out: dict[str, np.ndarray] = {}
        for name, arr in arrays.items():
            axis = self.axis(name)
            if axis is None:
                out[name] = arr
            elif isinstance(index, slice):
                where: list[Any] = [slice(None)] * arr.ndim
                where[axis] = index
                out[name] = arr[tuple(where)]
            else:
                out[name] = np.take(arr, np.asarray(index), axis=axis)
        return out

    def cut(self, arrays: Mapping[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
        """Samples start..stop (views, no copy)."""
        return self.take(arrays, slice(start, stop))

    def samples(self, arrays: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """One batch-1 dict per sample, as calibration tools want them."""
        return [self.cut(arrays, i, i + 1) for i in range(self.count(arrays))]

    def contiguous(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """C-contiguous copies where needed; a 0-d constant stays 0-d
        (np.ascontiguousarray would make it 1-d, and the model would see a vector)."""
        return {k: np.asarray(v, order="C") for k, v in arrays.items()}

    def batch_shape(self, name: str, shape: Sequence[int], batch_size: int) -> tuple[int, ...]:
        """`shape` (of any number of samples) with `batch_size` samples instead."""
        axis = self.axis(name)
        dims = [int(d) for d in shape]
        if axis is not None:
            dims[axis] = batch_size
        return tuple(dims)

    def sample_shape(self, name: str, shape: Sequence[int]) -> tuple[int, ...]:
        """`shape` without its batch axis: what one sample of the input looks like."""
        axis = self.axis(name)
        return tuple(int(d) for i, d in enumerate(shape) if i != axis)

    def npz_keys(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the data file holds beside the splits: constants once, and the batch
        axes that are not 0."""
        out: dict[str, np.ndarray] = {}
        for name, arr in arrays.items():
            axis = self.axis(name)
            if axis is None:
                out[CONST_PREFIX + name] = arr
            elif axis != 0:
                out[BATCH_AXIS_PREFIX + name] = np.asarray(axis, dtype=np.int64)
        return out


# Every input batched on axis 0: what a workload without batch_axes or constants has.
AXIS_0 = Layout()


def layout_in(files: Mapping[str, Any]) -> Layout:
    """The layout a data file records (an opened np.load, or a dict of its arrays)."""
    keys = list(files.keys())
    constants = tuple(k.removeprefix(CONST_PREFIX) for k in keys if k.startswith(CONST_PREFIX))
    axes = {
        k.removeprefix(BATCH_AXIS_PREFIX): int(files[k])
        for k in keys
        if k.startswith(BATCH_AXIS_PREFIX)
    }
    return Layout(axes, constants)


def read_layout(data_path: str | Any) -> Layout:
    """The layout the run's data file records."""
    with np.load(data_path, allow_pickle=False) as z:
        return layout_in(z)


def read_split(
    data_path: str | Any, split: str, names: Sequence[str]
) -> tuple[dict[str, np.ndarray], Layout]:
    """One split of the data file (quality, pool, calib, quality_alt), constants
    included, in `names` order, with the layout the file records."""
    with np.load(data_path, allow_pickle=False) as z:
        layout = layout_in(z)
        arrays = {
            n: z[CONST_PREFIX + n] if n in layout.constants else z[f"{split}/{n}"] for n in names
        }
    return arrays, layout


def has_split(data_path: str | Any, split: str, names: Sequence[str]) -> bool:
    """Whether the data file holds `split` (quality_alt exists only with variable axes)."""
    with np.load(data_path, allow_pickle=False) as z:
        layout = layout_in(z)
        return all(f"{split}/{n}" in z.files for n in layout.batched(names))


def split_names(files: Iterable[str], split: str) -> list[str]:
    """Input names of a data file in their order: a split's arrays and the constants,
    as the file lists them (np.savez keeps the order it was given)."""
    names: list[str] = []
    for key in files:
        for prefix in (f"{split}/", CONST_PREFIX):
            if key.startswith(prefix) and key.removeprefix(prefix) not in names:
                names.append(key.removeprefix(prefix))
    return names
