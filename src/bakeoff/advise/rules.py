"""What a rule reads (`Context`: the facts and what the user states) and returns
(`Advice`: what to try and why, what is out and why), the words the rules share, and
the rules on the model itself: its kind's reference, torch.compile, a transformer's
or an LLM's deployment, a custom architecture, Keras, JAX and TensorFlow models. Each
rule encodes the common decision logic of deployment guides; where it comes from is
said next to it. The target's rules are in rules_target.py, the machine's in
rules_machine.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bakeoff.advise.facts import Facts
from bakeoff.backends import REFERENCES

TARGETS = ("server-cpu", "server-gpu", "edge-intel", "mobile", "browser", "apple")
GOALS = ("latency", "throughput")
# x86 CPU targets: where OpenVINO and the CPU's INT8/BF16 instructions apply.
X86_TARGETS = ("server-cpu", "edge-intel")
NOT_MEASURED = "bakeoff cannot measure this yet"


@dataclass
class Advice:
    """One piece of advice. `confirm` says what a run can check:
    "reference": the proposed variant builds and runs (it is the yardstick);
    "wins": a proposed candidate (runtime and precision) wins or ties at some batch size;
    "runtime-wins": a candidate on a proposed runtime wins or ties, at any precision
    (advice on where to deploy, not on which precision);
    None: nothing a run measures (text, a warning, training)."""

    id: str
    text: str
    reason: str
    proposes: list[tuple[str, str]] = field(default_factory=list)  # (runtime, precision)
    excludes: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    confirm: str | None = None
    warning: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "reason": self.reason,
            "proposes": [list(p) for p in self.proposes],
            "excludes": [list(x) for x in self.excludes],
            "confirm": self.confirm,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class Context:
    facts: Facts
    target: str
    goal: str | None
    train: bool
    baseline_ms: float | None


Rule = Callable[[Context], list[Advice]]


def no_gpu_reason(ctx: Context) -> str | None:
    if ctx.facts.gpus:
        return None
    return f"no NVIDIA GPU on this machine ({ctx.facts.gpu_source})"


def rule_reference(ctx: Context) -> list[Advice]:
    """The FP32 reference in the model's own framework: every other variant is
    checked against it (bakeoff's quality gate; docs/method.md §1 step 3)."""
    kind = ctx.facts.model_kind
    reference = REFERENCES.get(kind)
    if reference is None or not reference.advised:
        return [
            Advice(
                "reference",
                f"no advice for model kind {kind!r}",
                "the fake runtime exists for bakeoff's own tests",
            )
        ]
    runtime, what = reference.runtime, reference.what
    pre = "a pretrained " if ctx.facts.pretrained else ""
    if ctx.facts.quantized:  # a .tflite quantized already: no FP32 model exists
        return [
            Advice(
                "reference",
                f"{what} as the reference ({runtime}-fp32 names it)",
                f"the file's weights are already {ctx.facts.quantized}: the file as it is "
                "is the yardstick for every other variant's quality and speed",
                proposes=[(runtime, "fp32")],
                confirm="reference",
            )
        ]
    return [
        Advice(
            "reference",
            f"{what} FP32 as the reference",
            f"{pre}{kind} model: its own framework at full precision is the yardstick "
            "for every other variant's quality and speed",
            proposes=[(runtime, "fp32")],
            confirm="reference",
        )
    ]


def rule_torch_compile(ctx: Context) -> list[Advice]:
    """PyTorch 2's compiler: same code, fused kernels, no export (PyTorch docs)."""
    if ctx.facts.model_kind not in ("torch", "hf"):
        return []
    if ctx.target not in (*X86_TARGETS, "server-gpu"):
        return []
    return [
        Advice(
            "torch-compile",
            "torch.compile (inductor) FP32",
            "the same PyTorch model, compiled: no export step that could fail",
            proposes=[("torch-compile", "fp32")],
            confirm="runtime-wins",
        )
    ]


def rule_transformer_deployment(ctx: Context) -> list[Advice]:
    """A pretrained transformer: ONNX Runtime and OpenVINO on x86 CPUs, TensorRT on
    NVIDIA (the Hugging Face Optimum route: optimum-onnxruntime, optimum-intel,
    TensorRT). LLMs have their own rule."""
    f = ctx.facts
    if f.family != "transformer" or f.model_kind not in ("hf", "onnx", "torch"):
        return []
    if ctx.target in X86_TARGETS:
        return [
            Advice(
                "transformer-x86",
                "ONNX Runtime and OpenVINO as deployment candidates",
                "a transformer on an x86 CPU: both fuse attention and layer norms and have "
                "tuned INT8 kernels",
                proposes=[("onnxruntime", "fp32"), ("openvino", "fp32")],
                confirm="runtime-wins",
            )
        ]
    if ctx.target == "server-gpu":
        no_gpu = no_gpu_reason(ctx)
        trt = ("tensorrt", "onnxruntime-tensorrt")
        return [
            Advice(
                "transformer-nvidia",
                "TensorRT (or ONNX Runtime's TensorRT provider) FP16 on NVIDIA",
                "a transformer on an NVIDIA GPU: TensorRT fuses attention into its own "
                "kernels and runs FP16 on tensor cores",
                proposes=[] if no_gpu else [(r, "fp16") for r in trt],
                excludes=[(r, no_gpu) for r in trt] if no_gpu else [],
                confirm="wins",
            )
        ]
    return []


def rule_generative_llm(ctx: Context) -> list[Advice]:
    """A generative LLM: serve it with a serving engine (vLLM: paged KV cache,
    continuous batching), not a hand-written generate loop; on CPUs, weight
    compression (INT8/INT4) is what makes it fit and fast (OpenVINO/NNCF guides)."""
    f = ctx.facts
    if f.family != "llm":
        return []
    out = [
        Advice(
            "llm-measures-prefill",
            "bakeoff times one forward pass (the prefill), not token-by-token generation",
            "a generative model's serving cost is dominated by decoding; treat the figures "
            "as a lower bound",
            warning=True,
        )
    ]
    size = ""
    gpu_mem = max((g.memory_mib or 0 for g in f.gpus), default=0)
    if ctx.target == "server-gpu" and f.params and gpu_mem and f.params * 2 > gpu_mem * 2**20 * 0.8:
        size = (
            f"; FP16 weights ({f.params * 2 / 2**30:.0f} GiB) do not fit the GPU's "
            f"{gpu_mem / 1024:.0f} GiB: use INT8/INT4 weights or tensor parallelism"
        )
    out.append(
        Advice(
            "llm-vllm",
            "serve it with vLLM, not a hand-written generation loop; measure it beside the "
            'others with task = "text-generation" in the workload\'s [model] (the generative '
            "bake-off: vLLM's CPU build after `make vllm`, OpenVINO GenAI, ONNX Runtime GenAI, "
            "llama.cpp, MLX)",
            "paged KV cache and continuous batching give many times the throughput of "
            "a plain loop" + size,
        )
    )
    if ctx.target in X86_TARGETS:
        out.append(
            Advice(
                "llm-weight-compression",
                "INT8 and INT4 weight compression (OpenVINO/NNCF, ONNX Runtime)",
                "LLM inference on a CPU is bound by memory bandwidth: fewer bytes per weight "
                "is directly more tokens per second",
                proposes=[
                    ("openvino", "int8"),
                    ("openvino", "int4"),
                    ("onnxruntime", "int4"),
                ],
                confirm="wins",
            )
        )
    return out


def rule_custom_architecture(ctx: Context) -> list[Advice]:
    """The user's own PyTorch code: PyTorch is the safe choice; exporters cover
    standard operators only (torch.onnx, OpenVINO's converter)."""
    if not ctx.facts.custom:
        return []
    return [
        Advice(
            "custom-architecture",
            "PyTorch (eager and torch.compile) first; custom operators may not export",
            "a custom architecture: ONNX and OpenVINO need every operator to be exportable; "
            "a candidate that cannot be exported is reported with the exporter's error",
            warning=True,
        ),
        Advice(
            "tvm",
            f"TVM if custom operators block the exporters or the hardware is unusual "
            f"({NOT_MEASURED} in a default run; try --runtimes tvm where installed)",
            "TVM compiles from the model's own graph for heterogeneous hardware",
        ),
    ]


def rule_keras(ctx: Context) -> list[Advice]:
    """A Keras model: Keras 3 runs it on JAX, TensorFlow and PyTorch unchanged;
    LiteRT is TensorFlow's mobile runtime (Keras 3 and LiteRT docs)."""
    if ctx.facts.model_kind != "keras":
        return []
    out = [
        Advice(
            "keras-backends",
            "Keras 3 on each backend (JAX, TensorFlow, PyTorch) and exported to TensorFlow",
            "the same Keras model runs on three backends, and as a SavedModel on TensorFlow "
            "Serving's runtime; their speed differs by model",
            proposes=[
                ("keras-jax", "fp32"),
                ("keras-tensorflow", "fp32"),
                ("keras-torch", "fp32"),
                ("tensorflow", "fp32"),
            ],
            confirm="runtime-wins",
        )
    ]
    if ctx.target in ("mobile", "edge-intel"):
        out.append(_on_device_litert("keras-litert", "a Keras model", ctx.target))
    return out


def rule_jax(ctx: Context) -> list[Advice]:
    """JAX code: jax.jit compiles it with XLA (JAX docs)."""
    if ctx.facts.model_kind != "jax":
        return []
    no_gpu = no_gpu_reason(ctx) if ctx.target == "server-gpu" else None
    return [
        Advice(
            "jax-jit",
            "jax.jit (XLA)",
            "JAX code: jit-compiled XLA is its fast path",
            proposes=[("jax", "fp32")]
            + ([("jax-cuda", "fp16")] if ctx.target == "server-gpu" and not no_gpu else []),
            excludes=[("jax-cuda", no_gpu)] if no_gpu else [],
            confirm="runtime-wins",
        )
    ]


def rule_savedmodel(ctx: Context) -> list[Advice]:
    if ctx.facts.model_kind != "savedmodel" or ctx.target not in ("mobile", "edge-intel"):
        return []
    return [_on_device_litert("savedmodel-litert", "a TensorFlow model", ctx.target)]


def rule_tflite(ctx: Context) -> list[Advice]:
    """A .tflite file: LiteRT runs it as it is, and OpenVINO reads it itself with no
    TensorFlow (OpenVINO's TFLite frontend); a float file can be quantized by NNCF
    there. Nothing converts it back to another framework."""
    if ctx.facts.model_kind != "tflite":
        return []
    quantized = ctx.facts.quantized
    proposes = [("litert", "fp32"), ("openvino", "fp32")]
    if quantized is None and ctx.target in X86_TARGETS:
        proposes.append(("openvino", "int8"))
    why = (
        f"its weights are {quantized} already, so no INT8 is built from it"
        if quantized
        else "a float file: NNCF quantizes it to INT8 on OpenVINO"
    )
    return [
        Advice(
            "tflite-runtimes",
            "the .tflite file on LiteRT (as it is) and on OpenVINO (its own TFLite reader)",
            f"a TFLite file runs on LiteRT, its own runtime, and OpenVINO reads it with no "
            f"TensorFlow; their speed differs by model; {why}",
            proposes=proposes,
            confirm="runtime-wins",
        )
    ]


def _on_device_litert(advice_id: str, model: str, target: str) -> Advice:
    """LiteRT FP32 and INT8 for `model` on a mobile or edge `target`: TensorFlow's
    on-device runtime takes Keras models and SavedModels alike."""
    return Advice(
        advice_id,
        "LiteRT (TensorFlow Lite) FP32 and INT8",
        f"{model} for {target}: LiteRT is its on-device runtime",
        proposes=[("litert", "fp32"), ("litert", "int8")],
        confirm="runtime-wins",
    )
