"""OpenVINO IR steps: ONNX -> IR and torch -> IR (kept FP32 on disk), NNCF
post-training INT8 (plain and accuracy-aware) and NNCF INT4 weight compression."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import AXIS_0, Layout
from bakeoff.tensors import OPENVINO_NUMPY_TYPES
from bakeoff.transforms import StepFailed, step_failed
from bakeoff.transforms.nncf_scope import float_scope, recurrent_types

# INT4 weight-only settings. Asymmetric keeps a zero point per group, which holds
# accuracy better than symmetric on weights that are not centred on zero; 128 is
# NNCF's and OpenVINO's usual group size for CPU kernels.
INT4_MODE = "int4_asym"
INT4_GROUP_SIZE = 128
INT4_RATIO = 1.0  # every eligible layer in INT4; first/last layers keep NNCF's INT8 backup

# OpenVINO's torch frontend: "No conversion rule found for operations: mylib::op, ..."
_UNCONVERTED = re.compile(r"No conversion rule found for operations: ([^\n]+)")


# NNCF's closing report: "N out of M were reverted back to the floating-point
# precision:\n\tname\n\tname" (its step-by-step messages include undone steps).
_REVERTED = re.compile(
    r"(\d+) out of (\d+) were reverted back to the floating-point precision:(.*)", re.DOTALL
)


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def input_types(ports: Iterable[Any]) -> list[tuple[str, Any]]:
    """(name, numpy dtype) of each model input, in order."""
    return [
        (p.get_any_name(), OPENVINO_NUMPY_TYPES.get(p.get_element_type().get_type_name()))
        for p in ports
    ]


def ir_from_onnx(onnx_path: str, out_dir: Path) -> dict[str, Any]:
    """The ONNX file as IR. A user's file is converted as given, not the normalized
    copy ONNX Runtime's quantizers start from (transforms/onnx_normalize.py):
    OpenVINO's ONNX frontend takes Constant weights and initializers listed as
    inputs as constants itself, and this IR is the FP32 OpenVINO candidate."""
    import openvino as ov

    try:
        model = ov.convert_model(onnx_path)
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the ONNX file (openvino.convert_model)",
            exc,
            "Try the onnxruntime candidates (they run the ONNX file itself); for a torch "
            "model, openvino fp32 direct (OpenVINO's PyTorch frontend, no ONNX); or convert "
            'the model with OpenVINO\'s own tools and give the IR as [model] kind = "openvino"',
        ) from exc
    path = out_dir / "model.xml"
    # save_model compresses weights to FP16 by default; an FP32 variant must not.
    ov.save_model(model, str(path), compress_to_fp16=False)
    return {"path": str(path)}


def ir_from_savedmodel(folder: str, out_dir: Path) -> dict[str, Any]:
    """A TensorFlow SavedModel folder as IR, through OpenVINO's own TensorFlow
    frontend: no TensorFlow is imported or needed. Its inputs keep the names of the
    serving signature's arguments, the names the workload's data has."""
    import openvino as ov

    try:
        model = ov.convert_model(folder)
    except Exception as exc:
        raise step_failed(
            "OpenVINO conversion of the SavedModel (openvino.convert_model)",
            exc,
            "Try the tensorflow candidates (they load the SavedModel itself), or convert "
            'it with OpenVINO\'s own tools and give the IR as [model] kind = "openvino"',
        ) from exc
    path = out_dir / "model.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)  # FP32 stays FP32
    return {"path": str(path)}


def ir_from_torch(
    source: Any, example: dict[str, np.ndarray], out_dir: Path, transformer: bool
) -> dict[str, Any]:
    """The torch module straight to IR with OpenVINO's PyTorch frontend (no ONNX).

    Each input's batch axis is dynamic (-1) so one IR serves every batch size;
    for transformer inputs the sequence axis is dynamic too, and so is every
    axis the workload declares variable. Constants keep their shape. Inputs are
    renamed to the data's array names, as the ONNX path names them.
    """
    import openvino as ov
    import torch

    from bakeoff.models import build_torch_model
    from bakeoff.transforms.onnx_export import operator_in

    module = build_torch_model(source)
    layout = Layout.of(source)
    names = list(example)
    # np.asarray keeps a 0-d constant 0-d (np.ascontiguousarray would make it 1-d).
    args = tuple(torch.from_numpy(np.asarray(example[n], order="C")) for n in names)
    variable: dict[str, list[int]] = source.variable_axes

    def dynamic(name: str, axis: int) -> bool:
        batch_axis = layout.axis(name)
        if batch_axis is None:  # a constant: the same shape in every call
            return False
        return axis == batch_axis or (transformer and axis == 1) or axis in variable.get(name, [])

    shapes = [
        ov.PartialShape([-1 if dynamic(name, axis) else dim for axis, dim in enumerate(a.shape)])
        for name, a in zip(names, args, strict=True)
    ]
    try:
        with torch.no_grad():
            model = ov.convert_model(module, example_input=args, input=shapes)
    except Exception as exc:
        text = str(exc)
        found = _UNCONVERTED.search(text)
        op = found.group(1).strip() if found else operator_in(text)
        head = "OpenVINO direct conversion failed" + (f" on operator {op}" if op else "")
        print(f"--- {type(exc).__name__} ---\n{text}", file=sys.stderr)  # whole text: build log
        raise StepFailed(f"{head}: {type(exc).__name__}: {_gist(text)}") from exc
    if len(model.inputs) != len(names):
        raise StepFailed(
            f"OpenVINO direct conversion gave {len(model.inputs)} inputs for the data's "
            f"{len(names)} arrays ({', '.join(names)})"
        )
    for port, name in zip(model.inputs, names, strict=True):
        port.get_tensor().set_names({name})
    path = out_dir / "model.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    return {"path": str(path), "exporter": "openvino.convert_model (torch, no ONNX)"}


def _gist(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _samples(
    model: Any, calibration: dict[str, np.ndarray], layout: Layout
) -> list[dict[str, np.ndarray]]:
    """One batch-1 input dict per calibration sample (cut along each input's batch
    axis, constants as they are), keyed and typed as the IR wants."""
    from bakeoff.tensors import map_inputs

    types = input_types(model.inputs)
    return [map_inputs(sample, types) for sample in layout.samples(calibration)]


def _ptq_kwargs(nncf: Any, n: int, transformer: bool, model: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"subset_size": n, "preset": nncf.QuantizationPreset.MIXED}
    kwargs.update(float_scope(nncf, model))  # recurrent operators stay float
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    return kwargs


def nncf_int8(
    ir_path: str,
    out_dir: Path,
    calibration: dict[str, np.ndarray],
    transformer: bool,
    layout: Layout = AXIS_0,
) -> dict[str, Any]:
    import nncf
    import openvino as ov

    model = ov.Core().read_model(ir_path)
    samples = _samples(model, calibration, layout)
    try:
        quantized = nncf.quantize(
            model, nncf.Dataset(samples), **_ptq_kwargs(nncf, len(samples), transformer, model)
        )
    except Exception as exc:
        raise step_failed(
            "NNCF INT8 post-training quantization (nncf.quantize)",
            exc,
            "Try the onnxruntime int8 candidates (dynamic needs no calibration), or openvino "
            "int4 weight-only (NNCF weight compression, no calibration)",
        ) from exc
    return _save_int8(
        quantized,
        out_dir,
        "nncf.quantize",
        transformer=transformer,
        smooth_quant=transformer,  # NNCF applies it for model_type transformer only
        calibration_samples=len(samples),
    )


def calibration_drop(
    fp32_ir: str,
    candidate_ir: str,
    calibration: dict[str, np.ndarray],
    metric: str,
    max_drop: float,
    layout: Layout = AXIS_0,
) -> float:
    """The quality gate's drop of `candidate_ir` against the FP32 IR on the calibration
    split (the hold-out stays unseen); agreement stands in for accuracy (no labels)."""
    import openvino as ov

    from bakeoff.judge.quality import evaluate

    core = ov.Core()
    outputs = []
    for path in (fp32_ir, candidate_ir):
        model = core.read_model(path)
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        rows = [
            np.asarray(compiled(s)[0], dtype=np.float32)
            for s in _samples(model, calibration, layout)
        ]
        outputs.append(np.concatenate(rows))
    val_metric = "agreement" if metric == "accuracy" else metric
    return float(evaluate(val_metric, outputs[1], outputs[0], None, max_drop).drop)


@dataclass(frozen=True)
class _GateValidation:
    """NNCF's validation function: the quality gate's drop (bakeoff.judge.quality)
    against the FP32 IR's outputs, as NNCF's metric 1 - drop, overall and per item."""

    metric: str
    reference: np.ndarray
    max_drop: float

    def drop_of(self, outputs: np.ndarray, rows: list[int]) -> float:
        from bakeoff.judge.quality import evaluate

        q = evaluate(self.metric, outputs, self.reference[rows], None, self.max_drop)
        # NNCF subtracts metrics; an infinite drop (NaN outputs) would make NaN there.
        return float(min(q.drop, 1e6))

    def __call__(
        self, compiled: Any, data: Iterable[tuple[int, dict[str, np.ndarray]]]
    ) -> tuple[float, list[float]]:
        rows, outs = [], []
        for i, inputs in data:
            rows.append(i)
            outs.append(np.asarray(compiled(inputs)[0], dtype=np.float32))
        stacked = np.concatenate(outs)
        per_item = [1.0 - self.drop_of(stacked[k : k + 1], [r]) for k, r in enumerate(rows)]
        return 1.0 - self.drop_of(stacked, rows), per_item


def _quantize_with_accuracy_control(
    model: Any, items: list[Any], validate: _GateValidation, transformer: bool
) -> tuple[Any, list[re.Match[str]]]:
    """NNCF's accuracy control, and what its log says it reverted to float."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    dataset = nncf.Dataset(items, lambda item: item[1])
    # NNCF says which layers it gave back to floating point only in its log.
    log = _Captured()
    logging.getLogger("nncf").addHandler(log)
    try:
        quantized = nncf.quantize_with_accuracy_control(
            model,
            dataset,
            dataset,
            validate,
            max_drop=validate.max_drop,
            drop_type=nncf.DropType.ABSOLUTE,
            # SmoothQuant off: NNCF 3.4 reverts a quantizer but keeps SmoothQuant's
            # rescaling around it, and the "restored" model drifts away from FP32
            # (on MiniLM every quantizer reverted still left a cosine drop of 0.7).
            advanced_quantization_parameters=AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1)
            ),
            **_ptq_kwargs(nncf, len(items), transformer, model),
        )
    except Exception as exc:
        raise step_failed(
            "NNCF accuracy-aware INT8 quantization (nncf.quantize_with_accuracy_control)",
            exc,
            "Try openvino int8 nncf (plain NNCF INT8) or the onnxruntime int8 candidates",
        ) from exc
    finally:
        logging.getLogger("nncf").removeHandler(log)
    return quantized, [m for m in map(_REVERTED.search, log.lines) if m]


def nncf_int8_accuracy_aware(
    ir_path: str,
    out_dir: Path,
    calibration: dict[str, np.ndarray],
    transformer: bool,
    metric: str,
    max_drop: float,
    layout: Layout = AXIS_0,
) -> dict[str, Any]:
    """NNCF INT8 that reverts the most harmful quantizers to FP32 until the drop fits.

    The validation metric is the quality gate's own comparison (bakeoff.judge.quality)
    against the FP32 IR's outputs, on the calibration split: NNCF sees 1 - drop
    (1 for the FP32 IR itself; NNCF divides by it, so not 0), so its absolute
    "accuracy drop" is the gate's drop and max_drop is the gate's max_drop.
    The quality hold-out stays unseen, so the gate still judges the result.
    """
    import openvino as ov

    # The calibration split has no labels: for "accuracy", agreement with the
    # FP32 top-1 is the closest label-free stand-in, and it is recorded as such.
    val_metric = "agreement" if metric == "accuracy" else metric
    core = ov.Core()
    model = core.read_model(ir_path)
    samples = _samples(model, calibration, layout)
    # f32 explicitly, as NNCF compiles for validation, so the reference is exact.
    fp32 = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    reference = np.concatenate([np.asarray(fp32(s)[0], dtype=np.float32) for s in samples])
    del fp32
    items = list(enumerate(samples))
    validate = _GateValidation(val_metric, reference, max_drop)
    quantized, reports = _quantize_with_accuracy_control(model, items, validate, transformer)
    remaining = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops())
    if remaining == 0:
        # Every quantizer went back to float: an FP32 model under an INT8 label.
        raise StepFailed(
            f"NNCF accuracy control reverted every quantizer to float: no INT8 model meets "
            f"max_drop {max_drop:g} ({val_metric} vs the FP32 IR on the calibration split)"
        )
    final = core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    achieved = 1.0 - validate(final, items)[0]
    del final
    return _save_int8(
        quantized,
        out_dir,
        "nncf.quantize_with_accuracy_control",
        transformer=transformer,
        smooth_quant=False,
        calibration_samples=len(samples),
        validation="calibration split vs the FP32 IR's outputs",
        validation_metric=val_metric,
        max_drop=max_drop,
        drop_type="absolute",
        calibration_drop=achieved,
        fake_quantize_ops=remaining,
        # NNCF's closing report; none when the plain INT8 model already met max_drop
        quantized_operations=int(reports[-1].group(2)) if reports else None,
        reverted_to_float=reports[-1].group(3).split() if reports else [],
    )


def _save_int8(
    quantized: Any,
    out_dir: Path,
    tool: str,
    transformer: bool,
    smooth_quant: bool,
    calibration_samples: int,
    **more: Any,
) -> dict[str, Any]:
    """Save an NNCF INT8 model (mixed preset) as `out_dir`/model.xml, unconverted to
    FP16; return its path and quantization settings: what every NNCF INT8 records,
    then `more`."""
    import openvino as ov

    path = out_dir / "model.xml"
    ov.save_model(quantized, str(path), compress_to_fp16=False)
    settings = {
        "tool": tool,
        "preset": "mixed",
        "model_type": "transformer" if transformer else "default",
        "smooth_quant": smooth_quant,
        "calibration_samples": calibration_samples,
        **more,
    }
    if recurrent_types(quantized):  # NNCF's ignored scope: transforms/nncf_scope.py
        settings["left_in_float"] = recurrent_types(quantized)
    return {"path": str(path), "quantization": settings}


def nncf_int4_weights(ir_path: str, out_dir: Path) -> dict[str, Any]:
    """INT4 weight-only compression (activations stay floating point) of an IR file."""
    import openvino as ov

    compressed, settings = compress_int4(ov.Core().read_model(ir_path))
    path = out_dir / "model.xml"
    ov.save_model(compressed, str(path), compress_to_fp16=False)
    return {"path": str(path), "quantization": settings}


def compress_int4(model: Any) -> tuple[Any, dict[str, Any]]:
    """NNCF's INT4 weight compression of an OpenVINO model: (the compressed model,
    the settings applied).

    Layers whose input size is not a multiple of the group size make NNCF stop;
    then it is retried with NNCF's ADJUST fallback (the largest power-of-two
    group that divides the layer, at least 32, else the INT8 backup) and the
    fallback and the groups applied are recorded. A model with no layer left in
    INT4 is a failed build, not an INT8 model under an INT4 label.
    """
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedCompressionParameters,
        GroupSizeFallbackMode,
    )

    mode = nncf.CompressWeightsMode(INT4_MODE)
    fallback: str | None = None
    try:
        try:
            compressed = nncf.compress_weights(
                model.clone(), mode=mode, group_size=INT4_GROUP_SIZE, ratio=INT4_RATIO
            )
        except nncf.InvalidGroupSizeError as exc:
            fallback = "adjust: " + " ".join(str(exc).split())
            compressed = nncf.compress_weights(
                model,
                mode=mode,
                group_size=INT4_GROUP_SIZE,
                ratio=INT4_RATIO,
                advanced_parameters=AdvancedCompressionParameters(
                    group_size_fallback_mode=GroupSizeFallbackMode.ADJUST
                ),
            )
    except Exception as exc:
        raise step_failed(
            "NNCF INT4 weight compression (nncf.compress_weights"
            + (", group-size fallback ADJUST)" if fallback else ")"),
            exc,
            "Try onnxruntime int4 weight-only (MatMulNBits) or the int8 candidates",
        ) from exc
    weights = compressed_weights(compressed)
    int4 = {k: v for k, v in weights.items() if v["bits"] == 4}
    if not int4:
        raise StepFailed(
            f"NNCF compressed no weight to INT4 ({len(weights)} kept in its INT8 backup, as "
            f"NNCF does for the first and last layers and for layers too small to group"
            f"{'; ' + fallback if fallback else ''}): INT4 weight-only does not apply here"
        )
    settings = {
        "tool": "nncf.compress_weights",
        "mode": INT4_MODE,
        "group_size": INT4_GROUP_SIZE,
        "ratio": INT4_RATIO,
        "all_layers": False,
        "backup_mode": "int8_asym",
        "group_size_fallback": fallback,
        "int4_weights": len(int4),
        "int8_weights": len(weights) - len(int4),
        "int4_group_sizes": sorted({v["group_size"] for v in int4.values()}),
    }
    return compressed, settings


def compressed_weights(model: Any) -> dict[str, dict[str, int]]:
    """Each low-bit weight NNCF left in the graph: {name: {"bits", "group_size"}}.

    A compressed weight is a low-bit Constant -> Convert -> Subtract/Multiply at
    port 0 (at port 1 of Subtract sits its zero point). Grouped weights are 3-D,
    [out, groups, group_size]; per-channel ones 2-D (group_size -1).
    """
    bits = {"i4": 4, "u4": 4, "i8": 8, "u8": 8}
    found: dict[str, dict[str, int]] = {}
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        b = bits.get(op.get_element_type().get_type_name())
        if b is None:
            continue
        for convert in op.output(0).get_target_inputs():
            if convert.get_node().get_type_name() != "Convert":
                continue
            for use in convert.get_node().output(0).get_target_inputs():
                if use.get_index() == 0 and use.get_node().get_type_name() in (
                    "Subtract",
                    "Multiply",
                ):
                    shape = list(op.get_output_shape(0))
                    group = int(shape[-1]) if len(shape) == 3 else -1
                    found[op.get_friendly_name()] = {"bits": b, "group_size": group}
    return found
