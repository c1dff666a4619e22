"""LiteRT (the successor of TensorFlow Lite) on the CPU, with XNNPACK: FP32, FP16
weight-only and INT8 full-integer post-training quantization, converted from a
Keras 3 model with TensorFlow's converter and run by ``ai-edge-litert``; and a
user's own .tflite file (kind "tflite") run as it is, which needs LiteRT alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import (
    calibration_data,
    check_options,
    example_inputs,
    package_availability,
)
from bakeoff.backends.tflite_io import dequantized, of_detail, plain_input_name
from bakeoff.batching import Layout
from bakeoff.hardware import emulation_note
from bakeoff.tensors import map_inputs
from bakeoff.transforms import cached_step

RUNTIME = "litert"
OPTIONS = {"threads"}
INSTALL = "pip install -e '.[frameworks]'  (or: make frameworks)"
METHODS = {"fp32": None, "fp16": "weight-only", "int8": "static"}


def availability() -> Availability:
    # LiteRT alone runs a .tflite file; converting a Keras model needs more, which
    # its offers say (`_conversion_missing`), so a .tflite runs without TensorFlow.
    return package_availability("ai-edge-litert", "ai_edge_litert", INSTALL)


def _conversion_missing() -> str | None:
    """Why a Keras model cannot be converted to LiteRT here, or None: conversion needs
    TensorFlow's converter (and Keras to load the model)."""
    for dist, module in (("tensorflow-cpu", "tensorflow"), ("keras", "keras")):
        a = package_availability(dist, module, INSTALL)
        if not a.available:
            return f"{a.reason} (needed to convert to LiteRT); install: {INSTALL}"
    return None


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind == "tflite":
        return [_file_offer(precision)]
    if model_kind != "keras":
        return [
            Offer(
                Variant(RUNTIME, precision),
                f"the model is {model_kind}; this version converts Keras models to LiteRT",
            )
        ]
    if precision in METHODS:
        note = emulation_note(precision) if precision == "int8" else None
        variant = Variant(RUNTIME, precision, METHODS[precision])
        return [Offer(variant, _conversion_missing(), note)]
    return [
        Offer(
            Variant(RUNTIME, precision),
            f"{precision} is not built: the LiteRT CPU kernels have no {precision} path "
            "(bf16 has no kernels; int4 only for weights of selected ops)",
        )
    ]


def _file_offer(precision: str) -> Offer:
    """A .tflite file runs as it is, under "fp32" (for a file quantized already, the
    run's note says its weights are not FP32); nothing else is built from it."""
    if precision == "fp32":
        return Offer(Variant(RUNTIME, "fp32"))
    return Offer(
        Variant(RUNTIME, precision),
        f"{precision} is not built: LiteRT runs the .tflite file as it is (litert-fp32), "
        "and there is no original model to convert to another precision from (OpenVINO's "
        "NNCF quantizes a float file to INT8)",
    )


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    if ctx.source.kind == "tflite":
        return _file_artifact(ctx)
    from bakeoff.transforms.keras_export import load_for_build
    from bakeoff.transforms.litert_convert import BACKEND, convert

    name = "litert-" + variant.id.removeprefix(RUNTIME + "-")

    def step(out: Any) -> dict[str, Any]:
        model = load_for_build(ctx.source, ctx.artifacts_dir, BACKEND, example_inputs(ctx))
        calib, layout = calibration_data(ctx)
        return convert(model, variant.precision, calib, out, layout)

    return cached_step(ctx.artifacts_dir, name, step)


def _file_artifact(ctx: BuildContext) -> dict[str, Any]:
    """The user's .tflite file itself: no step, no copy."""
    from pathlib import Path

    from bakeoff.backends.tflite_file import quantized_weights
    from bakeoff.transforms import StepFailed

    assert ctx.source.path is not None
    if not Path(ctx.source.path).is_file():
        raise StepFailed(f"the TFLite file {ctx.source.path} does not exist")
    artifact: dict[str, Any] = {"path": ctx.source.path, "exporter": "user-provided"}
    quantized = quantized_weights(ctx.source.path)
    if quantized is not None:  # recorded with the candidate's settings: not FP32 weights
        artifact["quantization"] = {"weights": f"{quantized}, quantized in the file"}
    return artifact


class LiteRtRunner:
    """One interpreter, resized once to the batch size (inputs keep their shape)."""

    def __init__(self, interpreter: Any, settings: dict[str, Any]) -> None:
        self.interpreter = interpreter
        self.settings = settings
        self.inputs = interpreter.get_input_details()
        self.outputs = output_tensors(interpreter)
        # A fully integer file's outputs are compared as the real values they stand for.
        self.output_quantization = [of_detail(d) for d in interpreter.get_output_details()]
        # The converter names inputs "serving_default_<keras input name>:0": matched to
        # the data's arrays by that name where all of them match, else by position.
        self.model_inputs = [(plain_input_name(d["name"]), d["dtype"]) for d in self.inputs]

    def prepare(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(map_inputs(batch, self.model_inputs).values())

    def run(self, prepared: list[np.ndarray]) -> list[np.ndarray]:
        it = self.interpreter
        for detail, array in zip(self.inputs, prepared, strict=True):
            it.set_tensor(detail["index"], array)
        it.invoke()  # synchronous: the output is complete on return
        return [it.get_tensor(index) for _, index in self.outputs]

    def to_numpy(self, output: list[np.ndarray]) -> np.ndarray:
        return dequantized(output[0], self.output_quantization[0])

    def named_outputs(self, output: list[np.ndarray]) -> list[tuple[str, Any]]:
        real = map(dequantized, output, self.output_quantization)
        return list(zip((name for name, _ in self.outputs), real, strict=True))


def output_tensors(interpreter: Any) -> list[tuple[str, int]]:
    """The interpreter's outputs as (name, tensor index), in the file's order. The
    converter names output tensors "StatefulPartitionedCall:0", ...: a file with a
    serving signature gives each its real name there (read through LiteRT's own
    signature list; without it, the tensor's name)."""
    details = interpreter.get_output_details()
    try:
        signature = interpreter._get_full_signature_list().get("serving_default", {})
        by_index = {index: name for name, index in signature.get("outputs", {}).items()}
    except Exception:  # an older LiteRT without it: the tensors' names
        by_index = {}
    return [(by_index.get(d["index"], d["name"]), d["index"]) for d in details]


def make_interpreter(path: str, threads: int) -> Any:
    """LiteRT's interpreter of the .tflite file at `path`, on `threads` threads (its
    default XNNPACK delegate); its tensors are not allocated yet (see `allocate`)."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=threads)


def allocate(interpreter: Any, layout: Layout, input_names: Sequence[str], batch_size: int) -> None:
    """Fix each input's batch axis to `batch_size`, then allocate the tensors. A model
    converted with a dynamic batch axis (-1 in shape_signature) takes any; each
    interpreter input is fed from the data input named like it where all of them
    match, else by position (as LiteRtRunner.prepare matches them)."""
    details = interpreter.get_input_details()
    plain = [plain_input_name(d["name"]) for d in details]
    names = plain if set(plain) <= set(input_names) else list(input_names)
    for detail, name in zip(details, names, strict=False):
        shape = layout.batch_shape(name, detail["shape"], batch_size)
        interpreter.resize_tensor_input(detail["index"], list(shape))
    interpreter.allocate_tensors()


def allocate_fixed(
    interpreter: Any, layout: Layout, input_names: Sequence[str], batch_size: int
) -> None:
    """`allocate` for a user's file, whose batch may be fixed (at 1, say): LiteRT
    resizes its inputs where the graph allows, and where it does not, the load fails
    with the batch size it could not run, not with LiteRT's traceback. A graph that
    takes the new input size but keeps its output's batch (a Reshape to a constant
    shape) cannot run it either: its outputs would not be one row per sample."""
    signature = [d["shape_signature"] for d in interpreter.get_input_details()]
    fixed = [int(s[0]) for s in signature if len(s) and int(s[0]) > 0]
    why = f"the .tflite file fixes the batch at {fixed[0]}" if fixed else "the .tflite file"
    before = [list(d["shape"]) for d in interpreter.get_output_details()]
    try:
        allocate(interpreter, layout, input_names, batch_size)
    except Exception as exc:
        gist = " ".join(str(exc).split())[:300]
        raise RuntimeError(
            f"{why}, and LiteRT cannot resize it to batch size {batch_size} "
            f"(resize_tensor_input: {type(exc).__name__}: {gist})"
        ) from None
    for out, shape in zip(interpreter.get_output_details(), before, strict=True):
        # an output that had the batch axis of the inputs and kept its old size
        stuck = bool(shape) and shape[0] in fixed and shape[0] != batch_size
        if stuck and int(out["shape"][0]) == shape[0]:
            raise RuntimeError(
                f"{why}: LiteRT resized its input to batch size {batch_size}, but the output "
                f"{plain_input_name(out['name'])} stays {list(out['shape'])}, so batch size "
                f"{batch_size} cannot run on LiteRT"
            )


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> LiteRtRunner:
    import importlib.metadata

    check_options(ctx.options, OPTIONS, RUNTIME)
    interpreter = make_interpreter(artifact["path"], ctx.threads)
    # fixed to the candidate's batch size once, before the tensors are allocated
    fit = allocate_fixed if ctx.source.kind == "tflite" else allocate
    fit(interpreter, Layout.of(ctx.source), ctx.input_names, ctx.batch_size)
    settings: dict[str, Any] = {
        "litert_version": importlib.metadata.version("ai-edge-litert"),
        "num_threads": ctx.threads,
        "delegate": "XNNPACK (default CPU delegate)",
        "batch_size": ctx.batch_size,
        "input_dtypes": [np.dtype(d["dtype"]).name for d in interpreter.get_input_details()],
        "exporter": artifact.get("exporter"),
    }
    if "quantization" in artifact:
        settings["quantization"] = artifact["quantization"]
    return LiteRtRunner(interpreter, settings)
