"""What the server serves: a model's tensors as the protocol describes them, and a way
to load one instance of it. `ExportedModel` is an export folder (`bakeoff export`),
loaded through the same `bakeoff.export.load` a deployment uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bakeoff.errors import UserError
from bakeoff.serve import protocol

# One loaded instance: input arrays by name -> output arrays by name.
Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class TensorSpec:
    """`shape` has -1 where it varies (the batch, and any variable axis);
    `batch_axis` is None for an input fed whole to every call (a constant)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    batch_axis: int | None = 0

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class TextInput:
    """A BYTES input taken instead of the token tensors, tokenized in the server by
    the model folder's own tokenizer, padded or cut to `max_length` as in the run."""

    name: str
    tokenizer: Path
    max_length: int
    produces: tuple[str, ...]


@dataclass
class ServedSpec:
    name: str
    platform: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    threads: int  # what the run measured with, shared out between instances
    text: TextInput | None = None
    # the variant's measurements per batch size, for --max-batch-size auto
    measured: list[dict[str, Any]] = field(default_factory=list)
    batch_size: int = 1  # the batch size of the candidate served
    description: str = ""


class Servable(Protocol):
    spec: ServedSpec

    def load(self, threads: int) -> Runner:
        """One instance with `threads` threads (the server may load several)."""
        ...


def datatype_of(dtype: str, where: str = "") -> str:
    """The protocol's datatype of a manifest's numpy dtype name (`where`: the file)."""
    try:
        return protocol.datatype_of(np.dtype(dtype))
    except (TypeError, ValueError):
        raise UserError(f"{where}dtype {dtype} has no Open Inference Protocol datatype") from None


class ExportedModel:
    """An export folder's manifest as a `ServedSpec`; `load` is `bakeoff.export.load`."""

    def __init__(self, folder: Path, name: str | None = None) -> None:
        from bakeoff.export.manifest import MANIFEST, check_files, read_manifest

        self.folder = folder
        # checked whole before the server listens: a wrong key or file is said now
        # (exit 2), not by a server that fails to load once it is up
        manifest = read_manifest(folder)
        check_files(folder, manifest)
        self.manifest = manifest
        where = f"{folder / MANIFEST}: "
        inputs = [_input_spec(i, where) for i in manifest["inputs"]]
        outputs = [
            TensorSpec(o["name"], datatype_of(o["dtype"], where), (-1, *o["shape"][1:]))
            for o in manifest.get("outputs") or []
        ] or [TensorSpec("output", "FP32", (-1,))]  # an older export: its shape is unknown
        text = manifest.get("text")
        self.spec = ServedSpec(
            name=name or manifest.get("workload") or "model",
            platform=f"{manifest['runtime']}_{manifest['precision']}",
            inputs=inputs,
            outputs=outputs,
            threads=int(manifest.get("threads") or 1),
            text=TextInput(
                "text", folder / text["tokenizer"], int(text["max_length"]), tuple(text["inputs"])
            )
            if text
            else None,
            measured=list(manifest.get("measured_by_batch_size") or []),
            batch_size=int(manifest.get("batch_size") or 1),
            description=f"{manifest['candidate']} of run {manifest['run_id']}",
        )

    def load(self, threads: int) -> Runner:
        from bakeoff.export.predictor import load_checked

        predictor = load_checked(
            self.folder, self.manifest, None if threads == self.spec.threads else threads
        )
        output = self.spec.outputs[0].name

        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {output: predictor(inputs)}

        return run


def _input_spec(entry: dict[str, Any], where: str) -> TensorSpec:
    shape = list(entry["shape"])
    axis = entry.get("batch_axis", 0)
    if axis is not None:
        shape[axis] = -1
    return TensorSpec(entry["name"], datatype_of(entry["dtype"], where), tuple(shape), axis)


def make_tokenizer(text: TextInput) -> Callable[[list[str]], dict[str, np.ndarray]]:
    """texts -> the token arrays the model takes, as the run tokenized its data."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        str(text.tokenizer), local_files_only=True, trust_remote_code=False
    )

    def tokenize(texts: list[str]) -> dict[str, np.ndarray]:
        enc = tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=text.max_length,
            return_tensors="np",
        )
        return {n: np.asarray(enc[n], dtype=np.int64) for n in text.produces}

    return tokenize
