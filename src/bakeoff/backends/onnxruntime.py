"""ONNX Runtime on the CPU execution provider: FP32, FP16, INT8 dynamic and static, and
INT4 weight-only. BF16 is offered as unavailable: the CPU provider has no kernels for it."""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import (
    calibration_data,
    check_options,
    example_inputs,
    package_availability,
)
from bakeoff.hardware import emulation_note
from bakeoff.tensors import ONNX_NUMPY_TYPES, map_inputs
from bakeoff.transforms import cached_step

RUNTIME = "onnxruntime"
# A session runs any size of the graph's dynamic batch axis.
ANY_BATCH_SIZE = True
OPTIONS = {"threads", "graph_optimization_level", "allow_spinning"}
INSTALL = "pip install onnxruntime==1.32.0"


def availability() -> Availability:
    return package_availability("onnxruntime", "onnxruntime", INSTALL)


def offers(precision: str, model_kind: str) -> list[Offer]:
    if model_kind == "tflite":
        return [Offer(Variant(RUNTIME, precision), _tflite_refused())]
    if model_kind not in ("torch", "hf", "onnx", "keras"):
        return [Offer(Variant(RUNTIME, precision), f"the model is {model_kind}, not ONNX-able")]
    if precision == "fp32":
        return [Offer(Variant(RUNTIME, "fp32"))]
    if precision == "int8":
        note = emulation_note("int8")
        return [
            Offer(Variant(RUNTIME, "int8", "dynamic"), note=note),
            Offer(Variant(RUNTIME, "int8", "static"), note=note),
        ]
    if precision == "fp16":
        # The CPU provider runs the float16 graph on any CPU (casting around the
        # operators it has no float16 kernel for: see transforms/ort_float16.py).
        return [Offer(Variant(RUNTIME, "fp16"), note=emulation_note("fp16"))]
    if precision == "bf16":
        return [Offer(Variant(RUNTIME, "bf16"), BF16_REASON)]
    if precision == "int4":
        return [Offer(Variant(RUNTIME, "int4", "weight-only"))]
    return [Offer(Variant(RUNTIME, precision), f"{precision} is not built by this version")]


def _tflite_refused() -> str:
    """Why a .tflite file gets no ONNX Runtime candidate: bakeoff converts none to
    ONNX. tf2onnx is the one converter that reads .tflite files, and it needs
    TensorFlow; where it is installed, the reason still must not promise a path
    bakeoff does not take."""
    found = package_availability("tf2onnx", "tf2onnx", "")
    if found.available:
        return (
            "this version does not convert a TFLite file to ONNX (tf2onnx is installed, "
            "but bakeoff does not run it); LiteRT and OpenVINO run the file itself"
        )
    return (
        "no TFLite-to-ONNX converter is installed (tf2onnx, the one that reads .tflite "
        "files, is not, and needs TensorFlow), and this version converts none; LiteRT and "
        "OpenVINO run the file itself"
    )


# Found by experiment with onnxruntime 1.32 (tests/transforms/test_ort_quantize.py
# repeats it): a bfloat16 graph fails at session creation with NOT_IMPLEMENTED.
BF16_REASON = (
    "ONNX Runtime's CPU execution provider has no bfloat16 kernels for MatMul, Gemm, Add, "
    "Mul, Div, Relu, Erf, Softmax and most other compute operators (creating the session "
    "fails with NOT_IMPLEMENTED); for BF16 on this CPU use torch autocast or OpenVINO"
)


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    from bakeoff.transforms.onnx_export import ensure_onnx
    from bakeoff.transforms.onnx_normalize import quantizer_input
    from bakeoff.transforms.ort_float16 import float16
    from bakeoff.transforms.ort_quantize import (
        INT4_BLOCK_SIZE,
        dynamic_int8,
        int4_weight_only,
        reduce_range_here,
        static_int8,
    )

    fp32 = ensure_onnx(ctx.source, ctx.artifacts_dir, example_inputs(ctx))
    if variant.precision == "fp32":
        return dict(fp32)  # the user's own file as given: it is the quality reference
    # A user's file from another converter is normalized first (weights as
    # initializers), once per run: the quantizers find no weight otherwise.
    source, normalized = quantizer_input(fp32, ctx.artifacts_dir)
    if variant.precision == "fp16":
        example = example_inputs(ctx)
        step = cached_step(
            ctx.artifacts_dir, "ort-fp16", lambda d: float16(source, d, example, normalized)
        )
    elif variant.precision == "int4":
        step = cached_step(
            ctx.artifacts_dir,
            f"ort-int4-weight-only-block{INT4_BLOCK_SIZE}",
            lambda d: int4_weight_only(source, d, INT4_BLOCK_SIZE, normalized),
        )
    elif variant.method == "dynamic":
        seven_bit = reduce_range_here()  # x86 without VNNI: 8-bit weights may saturate
        step = cached_step(
            ctx.artifacts_dir,
            "ort-int8-dynamic" + ("-7bit-weights" if seven_bit else ""),
            lambda d: dynamic_int8(source, d, normalized, reduce_range=seven_bit),
        )
    else:
        calib, layout = calibration_data(ctx)
        step = cached_step(
            ctx.artifacts_dir,
            "ort-int8-static",
            lambda d: static_int8(source, d, calib, layout=layout, normalized=normalized),
        )
    return {**step, "exporter": fp32["exporter"]}


class OrtRunner:
    def __init__(self, session: Any, settings: dict[str, Any]) -> None:
        self.session = session
        self.settings = settings
        self.inputs = [(i.name, ONNX_NUMPY_TYPES.get(i.type)) for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]

    def prepare(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return map_inputs(batch, self.inputs)

    def run(self, prepared: dict[str, np.ndarray]) -> Any:
        return self.session.run(None, prepared)

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        return list(zip(self.output_names, output, strict=True))


CPU_PROVIDERS = ("CPUExecutionProvider",)


def session_options(
    threads: int,
    *,
    inter_op_threads: int = 1,
    graph_optimization_level: str = "all",
    allow_spinning: bool | None = None,
    log_severity_level: int | None = 3,
) -> Any:
    """SessionOptions for a CPU session as bakeoff runs one: `threads` intra-op threads,
    sequential execution, the named graph optimization level. `allow_spinning` None
    leaves ONNX Runtime's default; log severity 3 logs errors only, None keeps ONNX
    Runtime's own level (warnings too). `bakeoff.export.load` sets up with this too."""
    import onnxruntime as ort

    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if graph_optimization_level not in levels:
        raise ValueError(f"graph_optimization_level must be one of {', '.join(levels)}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = inter_op_threads
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = levels[graph_optimization_level]
    if log_severity_level is not None:
        opts.log_severity_level = log_severity_level
    if allow_spinning is not None:
        opts.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if allow_spinning else "0"
        )
    return opts


def make_session(path: str, options: Any, providers: tuple[str, ...] = CPU_PROVIDERS) -> Any:
    """An InferenceSession of the model file at `path` (on the CPU provider by default)."""
    import onnxruntime as ort

    return ort.InferenceSession(path, options, providers=list(providers))


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> OrtRunner:
    import onnxruntime as ort

    check_options(ctx.options, OPTIONS, RUNTIME)
    level_name = str(ctx.options.get("graph_optimization_level", "all"))
    spinning = ctx.options.get("allow_spinning")
    opts = session_options(
        ctx.threads,
        graph_optimization_level=level_name,
        allow_spinning=None if spinning is None else bool(spinning),
    )
    session = make_session(artifact["path"], opts)
    settings = {
        "onnxruntime_version": ort.__version__,
        "providers": session.get_providers(),
        "intra_op_threads": opts.intra_op_num_threads,
        "inter_op_threads": opts.inter_op_num_threads,
        "execution_mode": "sequential",
        "graph_optimization_level": level_name,
        "allow_spinning": "default" if spinning is None else bool(spinning),
        "exporter": artifact.get("exporter"),
    }
    if "quantization" in artifact:
        settings["quantization"] = artifact["quantization"]
    return OrtRunner(session, settings)
