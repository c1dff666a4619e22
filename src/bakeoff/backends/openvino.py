"""OpenVINO on the CPU: FP32 (from ONNX, or straight from torch), FP16/BF16 as
inference precision hints, NNCF INT8 (plain and accuracy-aware) and NNCF INT4
weight-only. A model given as OpenVINO IR (kind "openvino") is its own FP32 IR; a
SavedModel folder or a .tflite file is read by OpenVINO itself (no TensorFlow).

The inference precision hint is always set explicitly: on CPUs with BF16
support OpenVINO otherwise runs an FP32 model in bf16 without saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import (
    calibration_data,
    check_options,
    example_inputs,
    is_transformer,
    package_availability,
)
from bakeoff.backends.tflite_io import Quantized, dequantized, io_quantization
from bakeoff.hardware import NATIVE, emulation_note, is_x86, native_flags
from bakeoff.tensors import map_inputs
from bakeoff.transforms import StepFailed, StepNotNeeded, cached_step
from bakeoff.transforms.openvino_convert import input_types, port_names

RUNTIME = "openvino"
# A compiled model with a dynamic batch axis runs any size of it.
ANY_BATCH_SIZE = True
OPTIONS = {"threads", "inference_precision", "num_streams", "performance_hint"}
INSTALL = "pip install openvino==2026.4.1 nncf==3.4.0"


def availability() -> Availability:
    return package_availability("openvino", "openvino", INSTALL)


# The inference precision each variant runs in; FP16/BF16 are hints on the FP32
# IR (the CPU plugin converts weights at compile time), not separate files.
_HINTS = {"fp16": "f16", "bf16": "bf16"}
_HINT_ALIASES = {"fp32": "f32", "fp16": "f16", "bfloat16": "bf16"}


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind not in ("torch", "hf", "onnx", "openvino", "keras", "savedmodel", "tflite"):
        return [Offer(Variant(RUNTIME, precision), f"the model is {model_kind}, not convertible")]
    if precision == "fp32":
        out = [Offer(Variant(RUNTIME, "fp32"))]
        if model_kind in ("torch", "hf"):  # torch -> IR with no ONNX in between
            out.append(Offer(Variant(RUNTIME, "fp32", "direct")))
        return out
    if precision in _HINTS:
        return [Offer(Variant(RUNTIME, precision), _hint_refused(precision))]
    if precision in ("int8", "int4"):
        methods = ["nncf", "nncf-aa"] if precision == "int8" else ["weight-only"]
        nncf = package_availability("nncf", "nncf", "pip install nncf==3.4.0")
        reason = None if nncf.available else f"{nncf.reason}; {nncf.install}"
        note = emulation_note("int8") if precision == "int8" else None
        return [Offer(Variant(RUNTIME, precision, m), reason, note) for m in methods]
    return [Offer(Variant(RUNTIME, precision), f"{precision} is not built by this version")]


def _hint_refused(precision: str) -> str | None:
    """OpenVINO's CPU plugin, unlike torch autocast, does not emulate f16/bf16: on a
    CPU without native arithmetic it runs another precision under the hint (seen:
    f16 ran as bf16 on an AVX-512 BF16 CPU, bf16 as f32 with the ISA capped to
    AVX2), so that variant would be measured under the wrong name."""
    if not is_x86() or native_flags(precision):
        return None
    return (
        f"OpenVINO's CPU plugin runs {precision} only on CPUs with native {precision} "
        f"arithmetic (one of {', '.join(NATIVE[precision])}); on this one it would run "
        f"another precision under the {_HINTS[precision]} hint"
    )


def _fp32_ir(ctx: BuildContext) -> dict[str, Any]:
    """The FP32 IR every other OpenVINO variant starts from: {"path", "exporter"}."""
    if ctx.source.kind == "openvino":
        # The user's own IR: no ONNX export, no conversion.
        assert ctx.source.path is not None
        xml = Path(ctx.source.path)
        if not xml.is_file():
            raise StepFailed(f"OpenVINO IR {xml} does not exist")
        if not xml.with_suffix(".bin").is_file():
            raise StepFailed(f"OpenVINO IR {xml} has no weights file {xml.with_suffix('.bin')}")
        return {"path": str(xml), "exporter": "user-provided"}
    from bakeoff.transforms.onnx_export import ensure_onnx
    from bakeoff.transforms.openvino_convert import ir_from_onnx, ir_from_savedmodel

    if ctx.source.kind == "savedmodel":  # OpenVINO reads it itself: no TensorFlow, no ONNX
        folder = str(ctx.source.path)
        ir = cached_step(ctx.artifacts_dir, "ov-fp32", lambda d: ir_from_savedmodel(folder, d))
        return {**ir, "exporter": "openvino.convert_model (SavedModel)"}
    if ctx.source.kind == "tflite":  # the same: OpenVINO's TFLite frontend
        return _tflite_ir(str(ctx.source.path), ctx.artifacts_dir)

    try:
        onnx_fp32 = ensure_onnx(ctx.source, ctx.artifacts_dir, example_inputs(ctx))
    except StepFailed as no_onnx:
        if ctx.source.kind != "keras":
            raise
        return _keras_savedmodel_ir(ctx, no_onnx)
    ir = cached_step(ctx.artifacts_dir, "ov-fp32", lambda d: ir_from_onnx(onnx_fp32["path"], d))
    return {**ir, "exporter": onnx_fp32["exporter"]}


def _keras_savedmodel_ir(ctx: BuildContext, no_onnx: StepFailed) -> dict[str, Any]:
    """A Keras model whose ONNX export failed: OpenVINO converts its SavedModel
    instead (written on the TensorFlow backend); the ONNX failure is kept with it."""
    from bakeoff.transforms.keras_savedmodel import savedmodel_from_keras
    from bakeoff.transforms.openvino_convert import ir_from_savedmodel

    try:
        folder = savedmodel_from_keras(ctx.source, ctx.artifacts_dir, example_inputs(ctx))["path"]
    except StepFailed as no_savedmodel:
        raise StepFailed(f"{no_onnx}; and then {no_savedmodel}") from no_savedmodel
    ir = cached_step(ctx.artifacts_dir, "ov-fp32", lambda d: ir_from_savedmodel(folder, d))
    return {
        **ir,
        "exporter": "keras tf_saved_model -> openvino.convert_model",
        "onnx_export_failed": str(no_onnx)[:300],
    }


def _tflite_ir(path: str, artifacts_dir: str) -> dict[str, Any]:
    """A .tflite file as IR, its batch axis made dynamic where the graph allows (one IR
    for every batch size, as ANY_BATCH_SIZE promises), else kept as the file fixes it
    (`fixed_batch`, which `load` and the runner check).

    A file whose weights are quantized already runs as it is, under "fp32" like its
    LiteRT reference: OpenVINO keeps the file's int8 weights (and runs them in int8
    where its CPU plugin has the kernels); the artifact's quantization says so, and
    the run's note (`backends.file_reference_note`). Calling it "int8" would give one
    file two names, and an FP32 model to compare it with does not exist.
    """
    from bakeoff.backends.tflite_file import quantized_weights
    from bakeoff.transforms.tflite_ir import ir_from_tflite

    ir = cached_step(artifacts_dir, "ov-fp32", lambda d: ir_from_tflite(path, d))
    out = {**ir, "exporter": "openvino.convert_model (TFLite)"}
    quantized = quantized_weights(path)
    if quantized is not None:
        out["quantization"] = {"weights": f"{quantized}, quantized in the file"}
    return out


def _already_quantized(variant: Variant, ctx: BuildContext) -> None:
    """NNCF is not run on a .tflite file quantized already: its weights are low-bit
    now, and openvino-fp32 runs them as they are. A hand-written candidate is built
    as asked."""
    if ctx.source.kind != "tflite" or not ctx.skip_unneeded or variant.precision in _HINTS:
        return
    from bakeoff.backends.tflite_file import quantized_weights

    quantized = quantized_weights(str(ctx.source.path))
    if quantized is not None and variant.precision != "fp32":
        raise StepNotNeeded(
            f"not needed: the .tflite file's weights are already {quantized}, and "
            "openvino-fp32 runs them as they are; NNCF has no FP32 weights to quantize"
        )


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    from bakeoff.transforms import nncf_quantize as quantize
    from bakeoff.transforms import openvino_convert as conv

    _already_quantized(variant, ctx)

    if variant.method == "direct":
        return cached_step(
            ctx.artifacts_dir,
            "ov-fp32-direct",
            lambda d: conv.ir_from_torch(
                ctx.source, example_inputs(ctx), d, transformer=is_transformer(ctx)
            ),
        )
    ir = _fp32_ir(ctx)
    if variant.precision == "fp32":
        return ir
    if variant.precision in _HINTS:
        hint = {"inference_precision_hint": _HINTS[variant.precision], "weights": "fp32 IR"}
        return {**ir, "quantization": hint}
    if variant.method == "weight-only":
        step = cached_step(
            ctx.artifacts_dir,
            "ov-int4-weight-only",
            lambda d: quantize.nncf_int4_weights(ir["path"], d),
        )
    elif variant.method == "nncf-aa":
        step = _accuracy_aware_int8(ctx, ir)
    else:
        step = _plain_int8(ctx, ir)
    return {**step, "exporter": ir["exporter"]}


def _accuracy_aware_int8(ctx: BuildContext, ir: dict[str, Any]) -> dict[str, Any]:
    """NNCF's accuracy control, tuned to the workload's quality gate, every output
    judged. It is for when plain NNCF INT8 fails the gate; when it passes, NNCF would
    revert nothing and the same model be measured twice (on one AVX2 machine that
    build took 89 s of a 307 s run, for a variant no faster and no more accurate
    than the plain one)."""
    from bakeoff.transforms import nncf_quantize as quantize

    calib, layout = calibration_data(ctx)
    gate = ctx.gate
    if ctx.skip_unneeded:
        plain = _plain_int8(ctx, ir)
        q = quantize.calibration_quality(ir["path"], plain["path"], calib, gate, layout=layout)
        if q.passed:
            where = f" on output {q.output}, the worst of {len(q.outputs)}" if q.outputs else ""
            raise StepNotNeeded(
                f"not needed: plain NNCF INT8 (openvino-int8-nncf) loses {q.drop:.4g} "
                f"({q.metric}{where}) on the calibration split, within max_drop "
                f"{q.max_drop:g}; the accuracy-aware variant is built only when it fails "
                "the gate there"
            )
    return cached_step(
        ctx.artifacts_dir,
        # the result depends on the gate's settings, so they name the step
        f"ov-int8-nncf-aa-{gate.key()}",
        lambda d: quantize.nncf_int8_accuracy_aware(
            ir["path"], d, calib, transformer=is_transformer(ctx), gate=gate, layout=layout
        ),
    )


def _plain_int8(ctx: BuildContext, ir: dict[str, Any]) -> dict[str, Any]:
    from bakeoff.transforms import nncf_quantize as quantize

    calib, layout = calibration_data(ctx)
    return cached_step(
        ctx.artifacts_dir,
        "ov-int8-nncf",
        lambda d: quantize.nncf_int8(
            ir["path"], d, calib, transformer=is_transformer(ctx), layout=layout
        ),
    )


class OpenVinoRunner:
    def __init__(
        self,
        compiled: Any,
        settings: dict[str, Any],
        fixed_batch: int | None = None,
        output_quantization: Sequence[Quantized | None] = (),
    ) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.output_names = port_names(compiled.outputs)
        self.settings = settings
        self.inputs = input_types(compiled.inputs)
        # A model file whose batch OpenVINO could not make dynamic runs only this one.
        self.fixed_batch = fixed_batch
        # A fully integer .tflite's outputs, compared as the real values they stand for.
        self.output_quantization = list(output_quantization) or [None] * len(self.output_names)

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        prepared = map_inputs(batch, self.inputs)
        if self.fixed_batch is not None:  # a worker kept across batch sizes comes here
            sizes = {a.shape[0] for a in prepared.values() if a.ndim}
            if sizes - {self.fixed_batch}:
                raise RuntimeError(_fixed_batch_refusal(self.fixed_batch, max(sizes)))
        return prepared

    def run(self, prepared: dict[str, np.ndarray]) -> Any:
        return self.request.infer(prepared)

    def to_numpy(self, output: Any) -> np.ndarray:
        return dequantized(output[0], self.output_quantization[0])

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        real = map(dequantized, output.to_tuple(), self.output_quantization)
        return list(zip(self.output_names, real, strict=True))

    def new_stream(self) -> Any:
        """An infer request of its own: one request serves one call at a time."""
        return self.compiled.create_infer_request().infer


def _plain(value: Any) -> Any:
    """OpenVINO properties come back as its own types; store them as plain values."""
    if hasattr(value, "get_type_name"):  # ov.Type, e.g. f32
        return value.get_type_name()
    if isinstance(value, (int, float, str, bool)):
        return value
    return getattr(value, "name", str(value))  # enums such as PerformanceMode.LATENCY


def _hint_name(value: str) -> str:
    return _HINT_ALIASES.get(value.lower(), value.lower())


def compile_cpu(path: str, config: dict[str, Any]) -> Any:
    """The model file at `path` compiled on OpenVINO's CPU plugin with `config` (property
    names as keys: INFERENCE_PRECISION_HINT...). `bakeoff.export.load` compiles with this
    too, with the config the candidate was measured with."""
    import openvino as ov

    core = ov.Core()
    return core.compile_model(core.read_model(path), "CPU", config)


def _fixed_batch_refusal(fixed: int, batch_size: int) -> str:
    return (
        f"the model file fixes the batch at {fixed} and OpenVINO could not reshape it "
        f"(model.reshape), so batch size {batch_size} cannot run on OpenVINO"
    )


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OpenVinoRunner:
    import openvino as ov

    check_options(ctx.options, OPTIONS, RUNTIME)
    fixed_batch = artifact.get("fixed_batch")
    if fixed_batch is not None and ctx.batch_size != fixed_batch:
        raise RuntimeError(_fixed_batch_refusal(fixed_batch, ctx.batch_size))
    # A candidate's own inference_precision wins over the variant's precision.
    hint = str(ctx.options.get("inference_precision", _HINTS.get(variant.precision, "f32")))
    config = {
        # Always explicit: left alone, OpenVINO runs FP32 models in bf16 on CPUs
        # with BF16 support. FP16/BF16 variants ask for theirs on purpose.
        "INFERENCE_PRECISION_HINT": hint,
        # Threads for the whole compiled model: `ctx.threads` per stream.
        "INFERENCE_NUM_THREADS": ctx.threads * ctx.streams,
        "NUM_STREAMS": int(ctx.options.get("num_streams", ctx.streams)),
        "PERFORMANCE_HINT": str(ctx.options.get("performance_hint", "LATENCY")),
    }
    compiled = compile_cpu(artifact["path"], config)
    settings: dict[str, Any] = {"openvino_version": ov.get_version(), "device": "CPU"}
    for key in config:  # record what OpenVINO actually applied, not what we asked for
        settings[key] = _plain(compiled.get_property(key))
    # Not set by us, but it changes quality: the CPU plugin quantizes activations
    # of layers with compressed (INT4/INT8) weights in groups of this size.
    if "DYNAMIC_QUANTIZATION_GROUP_SIZE" in compiled.get_property("SUPPORTED_PROPERTIES"):
        settings["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = _plain(
            compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")
        )
    applied = str(settings["INFERENCE_PRECISION_HINT"])
    if _hint_name(applied) != _hint_name(hint):
        # OpenVINO may quietly run another precision; a candidate labelled bf16
        # that runs f32 would be measured under the wrong name.
        raise RuntimeError(
            f"OpenVINO did not apply INFERENCE_PRECISION_HINT={hint} on this CPU: "
            f"the compiled model reports {applied}"
        )
    settings["exporter"] = artifact.get("exporter")
    if "quantization" in artifact:
        settings["quantization"] = dict(artifact["quantization"])
        if "inference_precision_hint" in settings["quantization"]:
            # a candidate's inference_precision option may have replaced the variant's
            settings["quantization"]["inference_precision_hint"] = applied
    if fixed_batch is not None:
        settings["fixed_batch"] = fixed_batch
    return OpenVinoRunner(compiled, settings, fixed_batch, _file_quantization(ctx, compiled))


def _file_quantization(ctx: LoadContext, compiled: Any) -> tuple[Quantized | None, ...]:
    """The integer outputs of a fully integer .tflite file, with the scales and zero
    points the file gives them (backends.tflite_io); none for any other model."""
    if ctx.source.kind != "tflite" or ctx.source.path is None:
        return ()
    outputs = io_quantization(ctx.source.path)[1]
    if len(outputs) != len(compiled.outputs):
        return ()
    return tuple(
        q if np.issubdtype(port.get_element_type().to_dtype(), np.integer) else None
        for q, port in zip(outputs, compiled.outputs, strict=True)
    )
