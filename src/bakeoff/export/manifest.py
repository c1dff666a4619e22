"""An export folder's `manifest.json` read back and checked: every key that `load` and
`bakeoff serve` read is there with its type, and every file it lists is there with
its sha256, so a manifest that was edited, cut short or written by something else is
refused with the key that is wrong (a UserError) before anything is loaded or served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bakeoff.cache import sha256_file
from bakeoff.errors import UserError
from bakeoff.user_files import read_json

MANIFEST = "manifest.json"
FORMAT = 1

# The keys of `load` each runtime's loader reads, whose values are thread counts.
_THREAD_KEYS = {
    "onnxruntime": ("intra_op_num_threads", "inter_op_num_threads"),
    "openvino": (),
    "torch": ("threads",),
    "torch-compile": ("threads",),
    "litert": ("num_threads",),
}


class _Checked(BaseModel):
    # strict: "3" is not 3 (the server compares and sizes with these numbers); other
    # keys are kept and not checked (the manifest also documents the run for people)
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)


class _File(_Checked):
    sha256: str


class _Tensor(_Checked):
    name: str
    dtype: str
    shape: list[int]

    @field_validator("dtype")
    @classmethod
    def _numeric(cls, value: str) -> str:
        try:
            numeric = np.dtype(value).kind in "biuf"
        except TypeError:  # not a dtype's name at all
            numeric = False
        if not numeric:
            raise ValueError(f"not a numeric numpy dtype: {value!r}")
        return value


class _Input(_Tensor):
    batch_axis: int | None = 0


class _Text(_Checked):
    tokenizer: str
    max_length: int = Field(ge=1)
    inputs: list[str] = Field(min_length=1)


class _Measured(_Checked):
    candidate: str | None = None
    batch_size: int = Field(ge=1)
    p50_ms: float | None = Field(default=None, ge=0)
    p99_ms: float | None = Field(default=None, ge=0)
    samples_per_s: float | None = Field(default=None, ge=0)
    offline_streams: int | None = Field(default=None, ge=1)
    offline_samples_per_s: float | None = Field(default=None, ge=0)


class _Manifest(_Checked):
    format: int
    run_id: str
    candidate: str
    runtime: str
    precision: str
    file: str
    files: dict[str, _File] = Field(min_length=1)
    load: dict[str, Any]
    inputs: list[_Input] = Field(min_length=1)
    outputs: list[_Tensor] | None = None
    text: _Text | None = None
    threads: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    workload: str | None = None
    measured_by_batch_size: list[_Measured] | None = None


# pydantic's words for a value of the wrong shape name its own classes: said in JSON's
_EXPECTED = {"model_type": "a JSON object", "dict_type": "a JSON object", "list_type": "a list"}


def _problem(exc: ValidationError) -> str:
    e = exc.errors()[0]
    key = ".".join(str(p) for p in e["loc"]) or "(top level)"
    if e["type"] == "missing":
        return f"{key} is missing"
    if e["type"] in _EXPECTED:
        return f"{key}: expected {_EXPECTED[e['type']]}"
    return f"{key}: {e['msg'].removeprefix('Value error, ')}"


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of export folder `folder`, as written, once every key `load` and the
    server read has been checked; a UserError that names the key otherwise."""
    path = folder / MANIFEST
    fix = "export the run again (bakeoff export RUN_ID --out DIR)"
    if not path.is_file():
        raise UserError(f"{folder}: no {MANIFEST}; not a bakeoff export: {fix}")
    manifest = read_json(path, str(path), fix)
    if not isinstance(manifest, dict):
        raise UserError(f"{path}: not a manifest (a JSON object); {fix}")
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path}: export format {manifest.get('format')!r} is not {FORMAT}; {fix}")
    try:
        _Manifest.model_validate(manifest)
    except ValidationError as exc:
        raise UserError(f"{path}: {_problem(exc)}; {fix}") from None
    runtime = manifest["runtime"]
    if runtime not in _THREAD_KEYS:
        raise UserError(f"{path}: runtime {runtime!r} has no loader here; {fix}")
    for key in _THREAD_KEYS[runtime]:
        value = manifest["load"].get(key)
        if type(value) is not int or value < 1:
            raise UserError(f"{path}: load.{key}: a thread count, not {value!r}; {fix}")
    for i, entry in enumerate(manifest["inputs"]):
        axis = entry.get("batch_axis", 0)
        if axis is not None and not 0 <= axis < len(entry["shape"]):
            raise UserError(
                f"{path}: inputs.{i}.batch_axis: {axis} is not an axis of shape "
                f"{entry['shape']}; {fix}"
            )
    return manifest


def check_files(folder: Path, manifest: dict[str, Any]) -> None:
    """Every file the manifest lists is in `folder`, as its sha256 says."""
    for name, info in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            raise UserError(f"{folder}: {name} is missing")
        if sha256_file(file) != info["sha256"]:
            raise UserError(f"{folder}: {name} does not match its sha256 in {MANIFEST}")
    if manifest["file"] not in manifest["files"]:
        raise UserError(f"{folder}/{MANIFEST}: file {manifest['file']!r} is not in its files")
