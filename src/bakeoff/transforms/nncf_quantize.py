"""NNCF on an OpenVINO IR: post-training INT8 (plain and accuracy-aware, tuned to the
workload's own quality gate) and INT4 weight compression."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.batching import AXIS_0, Layout
from bakeoff.judge.outputs import Named, OutputGate, worst_ratio
from bakeoff.judge.quality import Quality
from bakeoff.transforms import StepFailed, StepNotNeeded, step_failed
from bakeoff.transforms.nncf_scope import float_scope, recurrent_types
from bakeoff.transforms.openvino_convert import input_types, port_names

# INT4 weight-only settings. Asymmetric keeps a zero point per group, which holds
# accuracy better than symmetric on weights that are not centred on zero; 128 is
# NNCF's and OpenVINO's usual group size for CPU kernels.
INT4_MODE = "int4_asym"
INT4_GROUP_SIZE = 128
INT4_RATIO = 1.0  # every eligible layer in INT4; first/last layers keep NNCF's INT8 backup

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


def _call_outputs(compiled: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    result = compiled(inputs)
    return [np.asarray(result[port], dtype=np.float32) for port in compiled.outputs]


def _joined(compiled: Any, calls: list[list[np.ndarray]]) -> Named:
    """Each output of the compiled model over the calls, joined on axis 0, named."""
    names = port_names(compiled.outputs)
    return [(name, np.concatenate([c[i] for c in calls])) for i, name in enumerate(names)]


def _outputs_on(compiled: Any, samples: list[dict[str, np.ndarray]]) -> Named:
    return _joined(compiled, [_call_outputs(compiled, s) for s in samples])


def calibration_quality(
    fp32_ir: str,
    candidate_ir: str,
    calibration: dict[str, np.ndarray],
    gate: OutputGate,
    layout: Layout = AXIS_0,
) -> Quality:
    """The quality gate's verdict on `candidate_ir` against the FP32 IR on the
    calibration split (the hold-out stays unseen), every output judged, the worst
    one's figure; agreement stands in for accuracy (no labels)."""
    import openvino as ov

    core = ov.Core()
    found = []
    for path in (fp32_ir, candidate_ir):
        model = core.read_model(path)
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        found.append(_outputs_on(compiled, _samples(model, calibration, layout)))
    reference, candidate = found
    return gate.without_labels().on([n for n, _ in reference]).judge(candidate, reference)


@dataclass(frozen=True)
class _GateValidation:
    """NNCF's validation function: the quality gate (bakeoff.judge.outputs) against the
    FP32 IR's outputs, as one number NNCF can subtract, overall and per item.

    NNCF checks an absolute drop of its metric against one max_drop, while the gate
    gives each output its own: so the metric is 1 - r * max_drop, with r the worst
    output's drop over its own max_drop. NNCF's drop is then r * max_drop, within
    max_drop exactly when every output is within its own; with one output and one
    rule it is that output's drop."""

    gate: OutputGate
    reference: Named
    max_drop: float

    def metric(self, outputs: Named, rows: list[int]) -> float:
        reference = [(name, array[rows]) for name, array in self.reference]
        ratio = worst_ratio(self.gate.judge(outputs, reference))
        # NNCF subtracts metrics; an infinite drop (NaN outputs) would make NaN there.
        return 1.0 - min(ratio * self.max_drop, 1e6)

    def __call__(
        self, compiled: Any, data: Iterable[tuple[int, dict[str, np.ndarray]]]
    ) -> tuple[float, list[float]]:
        rows, calls = [], []
        for i, inputs in data:
            rows.append(i)
            calls.append(_call_outputs(compiled, inputs))
        joined = _joined(compiled, calls)
        per_item = [
            self.metric([(n, a[k : k + 1]) for n, a in joined], [r]) for k, r in enumerate(rows)
        ]
        return self.metric(joined, rows), per_item


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
    gate: OutputGate,
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

    core = ov.Core()
    model = core.read_model(ir_path)
    samples = _samples(model, calibration, layout)
    # f32 explicitly, as NNCF compiles for validation, so the reference is exact.
    fp32 = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    reference = _outputs_on(fp32, samples)
    del fp32
    # The calibration split has no labels: for "accuracy", agreement with the FP32
    # top-1 is the closest label-free stand-in, and it is recorded as such.
    gate = gate.without_labels().on([name for name, _ in reference])
    max_drop = gate.rule.max_drop
    items = list(enumerate(samples))
    validate = _GateValidation(gate, reference, max_drop)
    quantized, reports = _quantize_with_accuracy_control(model, items, validate, transformer)
    remaining = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops())
    if remaining == 0:
        # Every quantizer went back to float: an FP32 model under an INT8 label.
        raise StepFailed(
            f"NNCF accuracy control reverted every quantizer to float: no INT8 model meets "
            f"the quality gate ({gate.rule.metric}, max_drop {max_drop:g}, vs the FP32 IR on "
            "the calibration split)"
        )
    final = core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    achieved = gate.judge(_outputs_on(final, samples), reference)
    del final
    return _save_int8(
        quantized,
        out_dir,
        "nncf.quantize_with_accuracy_control",
        transformer=transformer,
        smooth_quant=False,
        calibration_samples=len(samples),
        validation="calibration split vs the FP32 IR's outputs",
        validation_metric=achieved.metric,
        max_drop=achieved.max_drop,
        drop_type="absolute",
        calibration_drop=achieved.drop,
        # where the model has several outputs: the worst one, and each one's figure
        **(
            {
                "calibration_output": achieved.output,
                "calibration_outputs": {q.output: q.drop for q in achieved.outputs},
            }
            if achieved.outputs
            else {}
        ),
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


# INT4 methods beside plain round-to-nearest: NNCF's data-aware weight compression.
INT4_METHODS = ("awq", "gptq")
# NNCF's log line when AWQ finds none of its layer patterns (a MatMul after a gating
# Multiply, as in LLaMA's MLP, or after a ReLU-, Swish- or Sigmoid-like activation).
_NO_AWQ = "No matching patterns were found for applying AWQ"


def compress_int4(
    model: Any, method: str = "", samples: list[dict[str, np.ndarray]] | None = None
) -> tuple[Any, dict[str, Any]]:
    """NNCF's INT4 weight compression of an OpenVINO model: (the compressed model,
    the settings applied). `method` "awq" or "gptq" tunes the weights to the
    activations `samples` (model inputs) give: AWQ rescales the input channels of
    the layers it finds a pattern for, GPTQ corrects each layer's rounding error.

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

    if method and method not in INT4_METHODS:
        raise StepFailed(f"NNCF INT4 methods are {', '.join(INT4_METHODS)}, not {method!r}")
    if method and not samples:
        raise StepFailed(f"{method.upper()} needs calibration samples; none were given")
    mode = nncf.CompressWeightsMode(INT4_MODE)
    tuned: dict[str, Any] = {}
    if method:
        tuned = {"dataset": nncf.Dataset(samples), "subset_size": len(samples or []), method: True}
    fallback: str | None = None
    log = _Captured()
    logging.getLogger("nncf").addHandler(log)
    try:
        try:
            compressed = nncf.compress_weights(
                model.clone(), mode=mode, group_size=INT4_GROUP_SIZE, ratio=INT4_RATIO, **tuned
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
                **tuned,
            )
    except Exception as exc:
        raise step_failed(
            f"NNCF INT4 weight compression (nncf.compress_weights{', ' + method if method else ''}"
            + (", group-size fallback ADJUST)" if fallback else ")"),
            exc,
            "Try onnxruntime int4 weight-only (MatMulNBits) or the int8 candidates",
        ) from exc
    finally:
        logging.getLogger("nncf").removeHandler(log)
    if method == "awq" and any(_NO_AWQ in line for line in log.lines):
        # The same model as plain INT4 under another name: NNCF's own finding.
        raise StepNotNeeded(
            "NNCF's AWQ found none of its layer patterns in this model (a MatMul after a "
            "gating Multiply, as in LLaMA's MLP, or after a ReLU-, Swish- or Sigmoid-like "
            "activation; NNCF does not scale through GELU), so it would be plain INT4 again"
        )
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
    if method:
        settings.update({"method": method, "calibration_samples": len(samples or [])})
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
