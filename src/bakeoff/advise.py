"""`bakeoff advise`: which stacks to try for this model, on this machine, for this target.

A list of small, explicit rules over what bakeoff can detect cheaply (the model's
kind and family, its parameter count, the CPU's instruction sets, an NVIDIA GPU,
Apple Silicon) and what the user states (the deployment target, the goal,
training). Each rule returns `Advice`: what to try and why, what is out and why.
The rules encode the common decision logic of deployment guides; where a rule
comes from is said next to it. Nothing here imports a runtime or a model: the
model is read from its files (config.json, safetensors headers, ONNX
initializers), never run.

After a run, `confirmations` says per piece of advice whether the measurement
confirmed it: advice is a hypothesis, the run is the test.
"""

from __future__ import annotations

import json
import platform
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bakeoff import hardware
from bakeoff.backends import REFERENCES, gpu
from bakeoff.errors import UserError
from bakeoff.workload import PRECISIONS, parse_spec

TARGETS = ("server-cpu", "server-gpu", "edge-intel", "mobile", "browser", "apple")
GOALS = ("latency", "throughput")
# x86 CPU targets: where OpenVINO and the CPU's INT8/BF16 instructions apply.
X86_TARGETS = ("server-cpu", "edge-intel")
# A baseline at or below this many ms per call (batch 1) leaves little to win.
SMALL_BASELINE_MS = 1.5
# Training memory per parameter with Adam in FP32: weights 4 + gradients 4 +
# two moments 8 bytes (ZeRO paper, Rajbhandari et al. 2020, section 3.1).
TRAIN_BYTES_PER_PARAM = 16
NOT_MEASURED = "bakeoff cannot measure this yet"

# Hugging Face config.json names that mark a generative (token-producing) model.
_GENERATIVE_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_DECODER_TYPES = frozenset(
    {
        "gpt2", "gptj", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen3",
        "phi", "phi3", "gemma", "gemma2", "gemma3", "falcon", "opt", "bloom", "mpt",
    }
)  # fmt: skip
_CNN_TYPES = frozenset(
    {
        "resnet", "convnext", "convnextv2", "efficientnet", "mobilenet_v1", "mobilenet_v2",
        "regnet", "bit", "mobilevit",
    }
)  # fmt: skip
_INT8_FLAGS = hardware.NATIVE["int8"]
_BF16_FLAGS = hardware.NATIVE["bf16"]
# NVIDIA runtimes (docs/method.md §6 names) and what each is.
_NVIDIA_RUNTIMES = {
    "tensorrt": "TensorRT",
    "onnxruntime-tensorrt": "ONNX Runtime with the TensorRT execution provider",
    "onnxruntime-cuda": "ONNX Runtime with the CUDA execution provider",
    "torch-cuda": "PyTorch on CUDA",
    "torch-compile-cuda": "torch.compile on CUDA",
}
# The built-in workloads' models, known without loading (minilm would tokenize,
# digits would train). digits: conv 1->16 and 16->32 (3x3), linear 512->64->10.
_DIGITS_FACTORY = "bakeoff.builtins.digits:build_model"
_DIGITS_PARAMS = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (512 * 64 + 64) + (64 * 10 + 10)


# ---------------------------------------------------------------- facts


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None


@dataclass(frozen=True)
class Facts:
    """What advice is based on: detected here, or stated by the user."""

    workload: str
    model_kind: str  # the workload's model.kind (builtins resolved to theirs)
    family: str  # transformer | llm | cnn | other | unknown
    architecture: str | None  # e.g. BertModel, or what the family was read from
    pretrained: bool  # a Hugging Face folder: weights trained by someone else
    custom: bool  # the user's own PyTorch code (model.factory)
    params: int | None
    params_source: str  # where the count comes from, or why it is unknown
    machine: str
    cpu_flags: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    gpu_source: str
    apple_silicon: bool
    memory_gib: float | None
    # Where cpu_flags come from: "/proc/cpuinfo", or BAKEOFF_CPU_FLAGS when simulated.
    cpu_flags_source: str = "/proc/cpuinfo"
    # Intel, AMD, Hygon, ... or "unknown"; BAKEOFF_CPU_VENDOR may simulate it.
    cpu_vendor: str = "unknown"

    def describe(self) -> str:
        params = "unknown" if self.params is None else _count(self.params)
        gpu = (
            ", ".join(f"{g.name} ({_mib(g.memory_mib)})" for g in self.gpus)
            if self.gpus
            else "no NVIDIA GPU"
        )
        arch = f" ({self.architecture})" if self.architecture else ""
        origin = "pretrained " if self.pretrained else "custom " if self.custom else ""
        return (
            f"model: {origin}{self.family}{arch}, kind {self.model_kind}, {params} parameters; "
            f"machine: {self.machine}"
            + (" (Apple Silicon)" if self.apple_silicon else "")
            + (f", {self.cpu_vendor} CPU" if self.cpu_vendor != "unknown" else "")
            + f", CPU flags {', '.join(self.cpu_flags) or 'none notable'}"
            + (
                f" (simulated by {hardware.FLAGS_VARIABLE})"
                if self.cpu_flags_source != "/proc/cpuinfo"
                else ""
            )
            + f"; {gpu}"
        )


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _mib(m: int | None) -> str:
    return "memory unknown" if m is None else f"{m / 1024:.0f} GiB"


def detect_gpus() -> tuple[tuple[Gpu, ...], str]:
    """NVIDIA GPUs (with memory where nvidia-smi says it) and where they were read: the
    one probe that the fingerprint and the CUDA runtimes read too."""
    found = gpu.probe()  # no framework: nvidia-smi or /proc only
    gpus = tuple(
        Gpu(g["name"], g["memory_mb"] if isinstance(g.get("memory_mb"), int) else None)
        for g in found.gpus
    )
    return gpus, found.source


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def _memory_gib() -> float | None:
    import psutil  # light; already a dependency of the fingerprint

    return round(psutil.virtual_memory().total / 2**30, 1)


def safetensors_params(files: list[Path]) -> int | None:
    """Element count from the headers: 8 bytes of length, then JSON; no tensor is read."""
    total = 0
    for f in files:
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            return None
        for name, info in header.items():
            if name != "__metadata__":
                size = 1
                for d in info.get("shape", []):
                    size *= int(d)
                total += size
    return total


def _hf_params(folder: Path, config: dict[str, Any]) -> tuple[int | None, str]:
    index = folder / "model.safetensors.index.json"
    files: list[Path] = []
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
            files = [folder / s for s in sorted(shards)]
        except (OSError, ValueError, KeyError):
            files = []
    elif (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    if files:
        n = safetensors_params(files)
        if n is not None:
            return n, "safetensors header"
    # A transformer's size from its config: 12 h^2 per layer plus the embeddings.
    h, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    vocab = config.get("vocab_size")
    if isinstance(h, int) and isinstance(layers, int) and isinstance(vocab, int):
        return 12 * layers * h * h + vocab * h, "estimate from config.json"
    return None, "unknown (no safetensors weights, config.json without sizes)"


def _hf_family(config: dict[str, Any]) -> tuple[str, str | None]:
    archs = [str(a) for a in config.get("architectures") or []]
    model_type = str(config.get("model_type", ""))
    arch = archs[0] if archs else model_type or None
    if (
        any(a.endswith(_GENERATIVE_SUFFIXES) for a in archs)
        or config.get("is_decoder") is True
        or model_type in _DECODER_TYPES
    ):
        return "llm", arch
    if model_type in _CNN_TYPES:
        return "cnn", arch
    if "num_attention_heads" in config or "n_head" in config:
        return "transformer", arch
    return "unknown", arch


def _onnx_facts(path: Path) -> tuple[str, str | None, int | None, str]:
    import onnx  # not a runtime: reads the protobuf; external data stays on disk

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a broken file: the run will say so; advice goes on
        return "unknown", None, None, f"unknown (cannot read {path.name}: {exc})"
    n = 0
    for init in model.graph.initializer:
        size = 1
        for d in init.dims:
            size *= int(d)
        n += size
    ops = {node.op_type for node in model.graph.node}
    if ops & {"Attention", "MultiHeadAttention"} or {"MatMul", "Softmax"} <= ops:
        family = "transformer"
    elif "Conv" in ops:
        family = "cnn"
    else:
        family = "other"
    return family, "ONNX graph", n, "ONNX initializers"


def model_facts(
    kind: str, path: str | None, weights: str | None, factory: str | None
) -> dict[str, Any]:
    """family, architecture, pretrained, custom, params, params_source: from files only."""
    out: dict[str, Any] = {
        "family": "unknown",
        "architecture": None,
        "pretrained": False,
        "custom": False,
        "params": None,
        "params_source": "unknown (not read for this model kind)",
    }
    if kind == "hf" and path:
        folder = Path(path)
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        out["family"], out["architecture"] = _hf_family(config)
        out["params"], out["params_source"] = _hf_params(folder, config)
        out["pretrained"] = True
    elif kind == "onnx" and path:
        fam, arch, n, src = _onnx_facts(Path(path))
        out.update(family=fam, architecture=arch, params=n, params_source=src)
    elif kind == "torch" and factory == _DIGITS_FACTORY:
        out.update(
            family="cnn",
            architecture="builtin:digits CNN",
            params=_DIGITS_PARAMS,
            params_source="builtin",
        )
    elif kind == "torch":
        out["custom"] = True
        if weights and weights.endswith(".safetensors"):
            n = safetensors_params([Path(weights)])
            out["params"] = n
            out["params_source"] = "safetensors header" if n is not None else "unknown"
        else:
            out["params_source"] = "unknown (counting would import torch and the model)"
    return out


def detect_facts(
    origin: str, kind: str, path: str | None, weights: str | None, factory: str | None
) -> Facts:
    gpus, gpu_source = detect_gpus()
    flags = hardware.cpu_flags()
    simulated = hardware.simulated_cpu_flags() is not None
    return Facts(
        workload=origin,
        model_kind=kind,
        machine=platform.machine(),
        cpu_flags=tuple(f for f in hardware.NOTABLE_FLAGS if f in flags),
        cpu_flags_source=hardware.FLAGS_VARIABLE if simulated else "/proc/cpuinfo",
        cpu_vendor=hardware.cpu_vendor() if hardware.is_x86() else "unknown",
        gpus=gpus,
        gpu_source=gpu_source,
        apple_silicon=is_apple_silicon(),
        memory_gib=_memory_gib(),
        **model_facts(kind, path, weights, factory),
    )


def default_target(facts: Facts) -> str:
    if facts.gpus:
        return "server-gpu"
    if facts.apple_silicon:
        return "apple"
    return "server-cpu"


# ---------------------------------------------------------------- advice


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


@dataclass(frozen=True)
class Proposal:
    runtime: str
    precision: str
    methods: tuple[str, ...]
    reason: str
    advice: str  # the advice id


@dataclass(frozen=True)
class Exclusion:
    what: str
    why: str
    advice: str
    installable: bool = False  # only missing a package here: a run shows it as unavailable


@dataclass
class AdviceReport:
    target: str
    target_source: str  # "stated" or "detected"
    goal: str | None
    train: bool
    facts: Facts
    advice: list[Advice]
    proposed: list[Proposal]
    excluded: list[Exclusion]

    def run_grid(self) -> tuple[list[str], list[str]]:
        """Runtimes and precisions for a run: proposed ones, plus runtimes only missing
        a package (they then show as unavailable with the install line, as before)."""
        runtimes: list[str] = []
        precisions: set[str] = set()
        for p in self.proposed:
            if p.runtime not in runtimes:
                runtimes.append(p.runtime)
            precisions.add(p.precision)
        for e in self.excluded:
            if e.installable and e.what not in runtimes:
                runtimes.append(e.what)
        return runtimes, [p for p in PRECISIONS if p in precisions]

    def left_out_methods(self) -> dict[str, str]:
        """Variant ids (runtime-precision-method) that the advice keeps out of a run
        although their runtime and precision are proposed, with why."""
        prefixes = tuple(f"{p.runtime}-{p.precision}-" for p in self.proposed)
        return {e.what: e.why for e in self.excluded if e.what.startswith(prefixes)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "target_source": self.target_source,
            "goal": self.goal,
            "train": self.train,
            "facts": asdict(self.facts),
            "facts_line": self.facts.describe(),
            "proposed": [asdict(p) for p in self.proposed],
            "excluded": [asdict(e) for e in self.excluded],
            "advice": [
                {
                    "id": a.id,
                    "text": a.text,
                    "reason": a.reason,
                    "proposes": [list(p) for p in a.proposes],
                    "excludes": [list(x) for x in a.excludes],
                    "confirm": a.confirm,
                    "warning": a.warning,
                }
                for a in self.advice
            ],
        }


@dataclass(frozen=True)
class Context:
    facts: Facts
    target: str
    goal: str | None
    train: bool
    baseline_ms: float | None


Rule = Callable[[Context], list[Advice]]


def _no_gpu(ctx: Context) -> str | None:
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
        no_gpu = _no_gpu(ctx)
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
    if ctx.target == "server-gpu":
        size = ""
        gpu_mem = max((g.memory_mib or 0 for g in f.gpus), default=0)
        if f.params and gpu_mem and f.params * 2 > gpu_mem * 2**20 * 0.8:
            size = (
                f"; FP16 weights ({f.params * 2 / 2**30:.0f} GiB) do not fit the GPU's "
                f"{gpu_mem / 1024:.0f} GiB: use INT8/INT4 weights or tensor parallelism"
            )
        no_gpu = _no_gpu(ctx)
        out.append(
            Advice(
                "llm-vllm",
                f"serve it with vLLM, not a hand-written generation loop ({NOT_MEASURED})",
                "paged KV cache and continuous batching give many times the throughput of "
                "a plain loop" + size,
                excludes=[("vllm", no_gpu)] if no_gpu else [],
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
        out.append(
            Advice(
                "keras-litert",
                "LiteRT (TensorFlow Lite) FP32 and INT8",
                f"a Keras model for {ctx.target}: LiteRT is its on-device runtime",
                proposes=[("litert", "fp32"), ("litert", "int8")],
                confirm="runtime-wins",
            )
        )
    return out


def rule_jax(ctx: Context) -> list[Advice]:
    """JAX code: jax.jit compiles it with XLA (JAX docs)."""
    if ctx.facts.model_kind != "jax":
        return []
    no_gpu = _no_gpu(ctx) if ctx.target == "server-gpu" else None
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
    return [
        Advice(
            "savedmodel-litert",
            "LiteRT (TensorFlow Lite) FP32 and INT8",
            f"a TensorFlow model for {ctx.target}: LiteRT is its on-device runtime",
            proposes=[("litert", "fp32"), ("litert", "int8")],
            confirm="runtime-wins",
        )
    ]


def rule_target(ctx: Context) -> list[Advice]:
    """Deployment by target: general -> ONNX Runtime; maximum NVIDIA performance ->
    TensorRT; Intel edge -> OpenVINO; mobile -> LiteRT; Apple -> MLX / Core ML."""
    kind, t = ctx.facts.model_kind, ctx.target
    # ONNX Runtime and OpenVINO are proposed for every model kind: the backends'
    # offers say which kinds they can export or convert, and exclude the rest with why.
    out: list[Advice] = []
    if t in ("server-cpu", "server-gpu", "edge-intel"):
        out.append(
            Advice(
                "onnxruntime-general",
                "ONNX Runtime: the general deployment choice",
                "one exported file runs on every OS and accelerator through execution providers",
                proposes=[("onnxruntime", "fp32")],
                confirm="runtime-wins",
            )
        )
    if t in X86_TARGETS:
        out.append(_openvino_advice(t, ctx.facts.cpu_vendor))
    if t == "server-gpu":
        no_gpu = _no_gpu(ctx)
        nvidia = [r for r in _NVIDIA_RUNTIMES if kind in ("torch", "hf") or "torch" not in r]
        out.append(
            Advice(
                "nvidia",
                "TensorRT for maximum NVIDIA performance; CUDA providers for the rest",
                "an NVIDIA GPU server: TensorRT builds engines tuned for the exact GPU",
                proposes=[] if no_gpu else [(r, "fp16") for r in nvidia],
                excludes=[(r, no_gpu) for r in nvidia] if no_gpu else [],
                confirm="wins",
            )
        )
        if no_gpu:
            out.append(
                Advice(
                    "measured-here",
                    "the target is server-gpu, but this machine has no NVIDIA GPU: only CPU "
                    "candidates can be measured here; run bakeoff on the GPU server",
                    no_gpu,
                    warning=True,
                )
            )
    if t in ("edge-intel", "mobile", "browser") or (t == "apple" and not ctx.facts.apple_silicon):
        out.append(
            Advice(
                "measured-here",
                f"timings are from this machine, not from a {t} device: they rank the candidates, "
                "the device's own figures will differ; run bakeoff there to be sure",
                f"the target {t} was stated; bakeoff measures where it runs",
                warning=True,
            )
        )
    if t == "mobile":
        out.append(
            Advice(
                "mobile",
                "LiteRT on the phone (PyTorch models convert with ai-edge-torch; "
                f"ExecuTorch is PyTorch's own route; {NOT_MEASURED} for PyTorch models)",
                "mobile: LiteRT runs on Android and iOS with GPU/NPU delegates",
                excludes=[("openvino", "OpenVINO does not target phones")]
                + [(r, "no NVIDIA GPU on a phone") for r in ("tensorrt", "onnxruntime-cuda")],
            )
        )
        out.append(
            Advice(
                "onnxruntime-mobile",
                "ONNX Runtime INT8 (the same graph ONNX Runtime Mobile runs)",
                "mobile: ONNX Runtime Mobile takes the exported, quantized graph",
                proposes=[("onnxruntime", "fp32"), ("onnxruntime", "int8")],
                confirm="runtime-wins",
            )
        )
    if t == "apple":
        out.append(
            Advice(
                "apple",
                f"MLX or Core ML on Apple Silicon ({NOT_MEASURED})",
                "Apple: Core ML reaches the Neural Engine; MLX uses the unified memory GPU",
                excludes=[
                    ("tensorrt", "no NVIDIA GPU on Apple Silicon"),
                    ("openvino", "OpenVINO is built for Intel hardware, not Apple Silicon"),
                ],
            )
        )
    if t == "browser":
        out.append(
            Advice(
                "browser",
                f"ONNX Runtime Web or LiteRT.js (WebGPU/WASM) ({NOT_MEASURED}); the native "
                "ONNX Runtime candidates show how the exported graph and its quantization fare",
                "browser: both run the exported graph client-side",
                proposes=[("onnxruntime", "fp32"), ("onnxruntime", "int8")],
                excludes=[("tensorrt", "a browser has no TensorRT")],
                confirm="runtime-wins",
            )
        )
    return out


def _openvino_advice(target: str, vendor: str) -> Advice:
    """OpenVINO is Intel's toolkit; its CPU plugin (oneDNN underneath) runs on any
    x86-64 CPU with AVX2. The words name the CPU this is: on AMD it is a candidate
    like any other, not a runtime built for this machine."""
    if target == "edge-intel":
        text, why = (
            "OpenVINO for the Intel edge device",
            "the target edge-intel was stated: OpenVINO is Intel's runtime for their CPUs, "
            "GPUs and NPUs",
        )
    elif vendor == "Intel":
        text, why = (
            "OpenVINO on this Intel CPU",
            "an Intel server CPU: OpenVINO's CPU plugin is Intel's own, tuned for their "
            "instruction sets",
        )
    else:
        cpu = f"{vendor} CPU" if vendor != "unknown" else "CPU (vendor unknown)"
        text, why = (
            f"OpenVINO as a candidate on this {cpu}",
            f"OpenVINO's CPU plugin runs on any x86-64 CPU with AVX2 but is tuned first for "
            f"Intel's; on this {cpu} whether it pays is unproven, so it is measured",
        )
    return Advice(
        f"openvino-{target}", text, why, proposes=[("openvino", "fp32")], confirm="runtime-wins"
    )


def rule_cpu_int8(ctx: Context) -> list[Advice]:
    """INT8 on every x86 CPU with AVX2. VNNI and AMX give native INT8 dot products
    (about 2-4x over FP32 for matmul-heavy models, Intel's VNNI/AMX guides); AVX2
    alone computes them through 16-bit multiply-adds, which may or may not beat
    FP32 (on one AVX2-only EPYC, ONNX Runtime's dynamic INT8 was 1.9x faster than
    FP32 at batch 1 while OpenVINO's was slower than its own FP32). So the flags
    only explain what to expect; the measurement decides."""
    f = ctx.facts
    if ctx.target not in X86_TARGETS or f.family == "llm":
        return []
    runtimes = [
        r
        for r, kinds in (
            ("onnxruntime", ("torch", "hf", "onnx", "keras")),
            ("openvino", ("torch", "hf", "onnx", "openvino", "keras")),
            ("torch", ("torch", "hf")),
        )
        if f.model_kind in kinds
    ]
    if not runtimes:
        return []
    path = hardware.int8_path()
    present = [x for x in f.cpu_flags if x in _INT8_FLAGS]
    excludes: list[tuple[str, str]] = []
    if path in ("amx", "vnni"):
        why = f"this CPU has {', '.join(present)}: native INT8 dot products"
    elif path == "avx2":
        why = (
            f"this CPU has AVX2 but none of {', '.join(_INT8_FLAGS)}: INT8 runs through "
            "16-bit multiply-adds, which may or may not beat FP32 here; unproven on this "
            "CPU, so it is measured"
        )
    elif path == "other":
        why = f"INT8 on this {f.machine} CPU runs on its runtimes' own kernels: measured"
    else:
        why = ""
        excludes.append(
            (
                "int8",
                "left out of the default grid: this x86 CPU has no AVX2, and the runtimes' "
                "INT8 kernels are built for AVX2 and newer, so INT8 is unlikely to pay here; "
                "to measure it anyway: --precisions fp32,int8",
            )
        )
    if f.family == "transformer" and "onnxruntime" in runtimes:
        excludes.append(("onnxruntime-int8-static", ORT_STATIC_TRANSFORMER_WHY))
    return [
        Advice(
            "cpu-int8",
            "INT8 quantization (dynamic, or static calibrated on your data)",
            why or "INT8 on an x86 CPU without AVX2",
            proposes=[] if path == "none" else [(r, "int8") for r in runtimes],
            excludes=excludes,
            confirm="wins",
        )
    ]


# Measured with onnxruntime 1.32 on builtin:minilm (QDQ, per-channel weights, MinMax
# calibration on 64 sentences): cosine 0.35 against FP32; quantizing only the
# MatMuls still lost 0.042, four times the default max_drop. Building and checking
# it cost ~30 s of every default run to learn that again.
ORT_STATIC_TRANSFORMER_WHY = (
    "not proposed for a transformer: ONNX Runtime's quantization guide recommends dynamic "
    "INT8 for transformers, since static INT8 fixes each activation's scale from "
    "calibration and their activations have outliers (all-MiniLM-L6-v2 lost 0.65 cosine); "
    'to measure it anyway, list it in [[candidates]] with method = "static"'
)


def rule_cpu_bf16(ctx: Context) -> list[Advice]:
    """BF16 on CPUs with AVX512-BF16/AMX-BF16: pays at larger batches, where the
    matmuls dominate; at batch 1 the conversions often eat the gain."""
    f = ctx.facts
    present = [x for x in f.cpu_flags if x in _BF16_FLAGS]
    if ctx.target != "server-cpu" or f.model_kind not in ("torch", "hf"):
        return []
    if not present and hardware.is_x86():
        # Left out on cost grounds only: torch autocast emulates BF16 here (OpenVINO
        # refuses it, ONNX Runtime's CPU provider has no kernels); asked for, it is built.
        return [
            Advice(
                "cpu-bf16",
                f"BF16 is left out of the default grid: this CPU has no native BF16 (none "
                f"of {', '.join(_BF16_FLAGS)})",
                "without it BF16 is emulated, usually slower than FP32",
                excludes=[
                    (
                        "bf16",
                        f"left out of the default grid: this CPU has none of "
                        f"{', '.join(_BF16_FLAGS)}, so BF16 is emulated (usually slower than "
                        "FP32); to measure it anyway: --precisions fp32,bf16,int8",
                    )
                ],
            )
        ]
    if not present:
        return []
    if ctx.goal == "throughput":
        return [
            Advice(
                "cpu-bf16",
                "BF16 (torch autocast, OpenVINO's bf16 hint)",
                f"goal throughput and this CPU has {', '.join(present)}",
                proposes=[("torch", "bf16"), ("openvino", "bf16")],
                confirm="wins",
            )
        ]
    return [
        Advice(
            "cpu-bf16",
            f"this CPU has {', '.join(present)}: add --precisions fp32,bf16,int8 to try BF16",
            "BF16 pays mostly at larger batches; proposed with --goal throughput",
        )
    ]


def rule_small_model(ctx: Context) -> list[Advice]:
    """A baseline that already takes about a millisecond: an optimization stack
    (export, quantization, a second runtime in production) may not pay for itself."""
    if ctx.baseline_ms is None or ctx.baseline_ms > SMALL_BASELINE_MS:
        return []
    return [small_model_advice(ctx.baseline_ms)]


def _ms(x: float) -> str:
    """Three significant figures: a tiny model's 0.004 ms is not "0.00 ms"."""
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def small_model_advice(baseline_ms: float) -> Advice:
    return Advice(
        "small-model",
        f"the baseline already takes {_ms(baseline_ms)} ms per call: an optimization stack "
        "may not pay for its complexity",
        "saving a fraction of a millisecond matters only at very high request rates; "
        "each extra runtime is one more dependency to ship and keep correct",
        warning=True,
        confirm="small",
    )


def rule_training(ctx: Context) -> list[Advice]:
    """Training: fits one device -> mixed precision and gradient accumulation; several
    GPUs on one machine -> DDP; does not fit -> FSDP, DeepSpeed ZeRO or LoRA
    (PyTorch distributed docs, ZeRO paper, LoRA paper)."""
    if not ctx.train:
        return []
    f = ctx.facts
    if f.gpus:
        device, mem_gib = "GPU", min((g.memory_mib or 0) for g in f.gpus) / 1024 or None
    else:
        device, mem_gib = "CPU", f.memory_gib
    need = None if f.params is None else f.params * TRAIN_BYTES_PER_PARAM / 2**30
    fits = None if need is None or not mem_gib else need < 0.5 * mem_gib  # activations too
    size = (
        "parameter count unknown"
        if need is None
        else f"about {need:.1f} GiB for weights, gradients and Adam state"
        + (f" vs {mem_gib:.0f} GiB of {device} memory" if mem_gib else "")
    )
    out: list[Advice] = []
    if fits is not False:
        native_bf16 = any(x in f.cpu_flags for x in _BF16_FLAGS)
        precision = "BF16 autocast" if f.gpus or native_bf16 else "FP16/BF16"
        out.append(
            Advice(
                "train-one-device",
                f"fits one {device}: mixed precision ({precision}) and gradient accumulation "
                f"for larger effective batches ({NOT_MEASURED})",
                size,
            )
        )
    if len(f.gpus) > 1:
        out.append(
            Advice(
                "train-ddp",
                f"{len(f.gpus)} GPUs on this machine: DistributedDataParallel via torchrun "
                f"({NOT_MEASURED})",
                "one model copy per GPU, gradients all-reduced: the simplest scaling",
            )
        )
    if fits is not True:
        out.append(
            Advice(
                "train-sharded",
                "if it does not fit one device: FSDP or DeepSpeed ZeRO shard the weights and "
                "optimizer state; for fine-tuning a pretrained model, LoRA trains a few "
                f"adapters instead ({NOT_MEASURED})",
                size,
            )
        )
    return out


# The rules, in the order their advice is shown.
RULES: tuple[Rule, ...] = (
    rule_reference,
    rule_torch_compile,
    rule_transformer_deployment,
    rule_generative_llm,
    rule_custom_architecture,
    rule_keras,
    rule_jax,
    rule_savedmodel,
    rule_target,
    rule_cpu_int8,
    rule_cpu_bf16,
    rule_small_model,
    rule_training,
)


# ---------------------------------------------------------------- measurable?


def _backend_check(runtime: str, precision: str, kind: str) -> tuple[str, Any]:
    """("ok", methods) | ("not-registered", why) | ("missing", why) | ("offer", why)."""
    from bakeoff.backends import get_backend

    try:
        backend = get_backend(runtime)
    except KeyError:
        return "not-registered", f"bakeoff has no {runtime} backend ({NOT_MEASURED})"
    available = backend.availability()
    if not available.available:
        return "missing", f"{available.reason}; install: {available.install}"
    offers = backend.offers(precision, kind)
    usable = [o for o in offers if o.reason is None]
    if not usable:
        return "offer", "; ".join(str(o.reason) for o in offers) or f"no {precision} variant"
    return "ok", tuple(o.variant.method or "default" for o in usable)


def collect(advice: list[Advice], kind: str) -> tuple[list[Proposal], list[Exclusion]]:
    """Proposals that bakeoff can build here; everything else excluded with why."""
    proposed: dict[tuple[str, str], Proposal] = {}
    excluded: dict[str, Exclusion] = {}
    for a in advice:
        for what, why in a.excludes:
            excluded.setdefault(what, Exclusion(what, why, a.id))
    for a in advice:
        for runtime, precision in a.proposes:
            key = (runtime, precision)
            if key in proposed or runtime in excluded or precision in excluded:
                continue
            state, detail = _backend_check(runtime, precision, kind)
            if state == "ok":
                methods = tuple(m for m in detail if f"{runtime}-{precision}-{m}" not in excluded)
                proposed[key] = Proposal(runtime, precision, methods, a.reason, a.id)
            elif state == "offer":
                excluded.setdefault(
                    f"{runtime}-{precision}", Exclusion(f"{runtime}-{precision}", detail, a.id)
                )
            else:
                excluded.setdefault(
                    runtime, Exclusion(runtime, detail, a.id, installable=state == "missing")
                )
    return list(proposed.values()), list(excluded.values())


def advise_facts(
    facts: Facts,
    target: str | None = None,
    goal: str | None = None,
    train: bool = False,
    baseline_ms: float | None = None,
) -> AdviceReport:
    if target is not None and target not in TARGETS:
        raise UserError(f"--target: expected one of {', '.join(TARGETS)}, got {target!r}")
    if goal is not None and goal not in GOALS:
        raise UserError(f"--goal: expected one of {', '.join(GOALS)}, got {goal!r}")
    if baseline_ms is not None and baseline_ms <= 0:
        raise UserError(f"--baseline-ms must be positive, got {baseline_ms}")
    chosen = target or default_target(facts)
    ctx = Context(facts, chosen, goal, train, baseline_ms)
    # A kind without a reference (the fake runtime) gets no advice beyond saying so.
    reference = REFERENCES.get(facts.model_kind)
    rules = RULES if reference is not None and reference.advised else (rule_reference,)
    advice = [a for rule in rules for a in rule(ctx)]
    proposed, excluded = collect(advice, facts.model_kind)
    source = "stated" if target else "detected"
    return AdviceReport(chosen, source, goal, train, facts, advice, proposed, excluded)


def _builtin_model(name: str) -> tuple[str, str | None, str | None]:
    """(kind, path, factory) of a built-in workload's model, without loading it."""
    from bakeoff.builtins import BUILTINS

    if name == "minilm":
        from bakeoff.builtins.minilm import model_folder

        return "hf", model_folder(), None
    if name == "digits":
        return "torch", None, _DIGITS_FACTORY
    if name == "digits-keras":
        from bakeoff.builtins.digits_keras import model_path

        return "keras", str(model_path()), None  # may not be trained yet: not read
    raise UserError(f"builtin:{name}: no such built-in workload (have: {', '.join(BUILTINS)})")


def facts_for_ref(ref: str | None) -> Facts:
    """Facts for `builtin:NAME` or a workload TOML, from the spec and model files only:
    no data is loaded, no factory imported (an MXNet workload is refused by the spec)."""
    ref = ref or "builtin:minilm"
    if ref.startswith("builtin:"):
        kind, path, factory = _builtin_model(ref.removeprefix("builtin:"))
        return detect_facts(ref, kind, path, None, factory)
    file = Path(ref)
    if not file.is_file():
        raise UserError(
            f"{ref}: no such workload file (give a .toml path or builtin:minilm / builtin:digits)"
        )
    spec = parse_spec(file.read_text(encoding="utf-8"), ref)
    model = spec.model
    if model.kind == "builtin":
        assert model.name is not None
        kind, path, factory = _builtin_model(model.name)
        return detect_facts(ref, kind, path, None, factory)
    base = file.resolve().parent
    path = str((base / model.path).absolute()) if model.path else None
    weights = str((base / model.weights).absolute()) if model.weights else None
    return detect_facts(ref, model.kind, path, weights, model.factory)


def advise(
    ref: str | None,
    target: str | None = None,
    goal: str | None = None,
    train: bool = False,
    baseline_ms: float | None = None,
) -> AdviceReport:
    return advise_facts(facts_for_ref(ref), target, goal, train, baseline_ms)


# ---------------------------------------------------------------- after a run


def _batch1_p50(doc: dict[str, Any], cid: str | None) -> float | None:
    c = next((c for c in doc["candidates"] if c["id"] == cid), None)
    lat = c and c.get("latency_ms")
    return None if not lat else float(lat["p50"])


def _chosen_by(doc: dict[str, Any], key: str) -> str | None:
    """Who chose the run's runtimes or precisions, in words; None for a run stored
    before it recorded that."""
    settings = doc.get("settings") or {}
    source = (settings.get("grid_from") or {}).get(key)
    grid = ",".join(settings.get(key) or [])
    return {
        f"--{key}": f"by you (--{key} {grid})",
        "workload": f"by the workload ([search] {key} = {grid})",
        "defaults": f"by the defaults ({key} {grid})",
        "advice": f"by the advice (its grid of {key}: {grid})",
    }.get(source or "")


def not_measured_why(item: dict[str, Any], doc: dict[str, Any], excluded: list[dict]) -> str:
    """Who left a piece of advice out of the run, and why: the advice itself (an
    exclusion, with its reason), the workload's hand-written candidates, or the
    user's, workload's or defaults' choice of runtimes and precisions."""
    settings = doc.get("settings") or {}
    proposes = [tuple(p) for p in item.get("proposes") or []]
    if not proposes:
        why = "; ".join(str(w) for _, w in item.get("excludes") or [])
        return f"left out by the advice: {why}" if why else "nothing here to measure"
    hand_written = (settings.get("grid_from") or {}).get("runtimes") == "candidates"
    # (words before, words after) the things one reason leaves out -> those things
    reasons: dict[tuple[str, str], list[str]] = {}
    for runtime, precision in proposes:
        hit = next(
            (e for e in excluded if e["what"] in (runtime, precision, f"{runtime}-{precision}")),
            None,
        )
        both = f"{runtime} {precision}"
        grid = (("runtimes", runtime), ("precisions", precision))
        missing = next(((k, v) for k, v in grid if v not in (settings.get(k) or [])), None)
        if hit is not None:
            key, what = (f"left out by the advice: {hit['why']}", ""), ""
        elif hand_written:
            key, what = ("left out by the workload: its [[candidates]] include no ", ""), both
        elif missing is not None:
            who = _chosen_by(doc, missing[0])
            key, what = ("", f" left out {who}" if who else " was not in the run"), missing[1]
        else:
            key, what = ("no ", " candidate was built"), both
        whats = reasons.setdefault(key, [])
        if what and what not in whats:
            whats.append(what)
    return "; ".join(f"{a}{' or '.join(w)}{b}" for (a, b), w in reasons.items())


def _standing(
    cands: list[dict[str, Any]], verdicts: list[dict[str, Any]]
) -> tuple[bool, str] | None:
    """Whether a proposed candidate leads, or is tied with the leader, at some batch
    size, in words that match the verdict: a leader not separated from the
    baseline does not confirm advice that something beats the baseline."""
    ids = {c["id"] for c in cands}
    against: tuple[bool, str] | None = None
    for v in verdicts:
        leader, base, bs = v.get("winner"), v.get("baseline"), v["batch_size"]
        tied = [t for group in v.get("ties", []) for t in group[1:]]
        hit = next((t for t in [leader, *tied] if t in ids), None)
        if hit is None:
            continue
        standing = v.get("standing") or "clear"  # a run stored before standings
        sp = v.get("speedup")
        if hit == leader and standing == "baseline-tied":
            against = against or (
                False,
                f"measured: {hit} leads at batch {bs}, but is not separated from the "
                f"baseline {base}",
            )
            continue
        if hit != leader and standing == "baseline-tied" and hit != base:
            against = against or (
                False,
                f"measured: {hit} is tied with the leader {leader} at batch {bs}, and "
                f"neither is separated from the baseline {base}",
            )
            continue
        if hit != leader:
            return True, f"measured: {hit} is tied with the leader {leader} at batch {bs}"
        if base == hit:
            return True, f"measured: {hit}, the baseline, leads at batch {bs}"
        gain = f", {sp['value']:.2f}× over the baseline {base}" if sp and base else ""
        if standing == "leads":
            return True, f"measured: {hit} leads at batch {bs}{gain}, tied with {', '.join(tied)}"
        return True, f"measured: {hit} is fastest at batch {bs}{gain}"
    return against


def _confirm_one(
    item: dict[str, Any], doc: dict[str, Any], excluded: list[dict] | None = None
) -> tuple[bool | None, str]:
    kind = item.get("confirm")
    if kind is None:
        return None, "nothing a run measures"
    verdicts = doc.get("verdicts", [])
    if kind == "small":
        v1 = next((v for v in verdicts if v["batch_size"] == 1), None)
        base = _batch1_p50(doc, v1 and v1["baseline"])
        win = _batch1_p50(doc, v1 and v1["winner"])
        if v1 is None or base is None or win is None:
            return None, "no batch-1 baseline and winner were measured"
        saved = base - win
        said = f"measured: the leader {v1['winner']} saves {_ms(saved)} ms per call"
        return saved < 0.5, said
    wanted = {tuple(p) for p in item.get("proposes", [])}
    if kind == "runtime-wins":
        # Advice about where to deploy (a runtime) holds when that runtime wins at
        # whatever precision; advice about a precision needs that precision to win.
        runtimes = {r for r, _ in wanted}
        cands = [c for c in doc["candidates"] if c["runtime"] in runtimes]
    else:
        cands = [c for c in doc["candidates"] if (c["runtime"], c["precision"]) in wanted]
    if not cands:
        return None, not_measured_why(item, doc, excluded or [])
    ok = [c for c in cands if c["status"] == "ok"]
    if kind == "reference":
        if ok:
            return True, f"measured: {ok[0]['id']} built and ran as the reference"
        c = cands[0]
        return False, f"{c['id']} is {c['status']}: {c['reason']}"
    standing = _standing(cands, verdicts)
    if standing is not None:
        return standing
    if ok:
        beaten = ", ".join(
            f"batch {v['batch_size']}: {v['winner']}" for v in verdicts if v.get("winner")
        )
        return False, f"measured: {ok[0]['id']} is ok but not the leader ({beaten or 'none'})"
    rejected = [c for c in cands if c["status"] == "rejected"]
    if rejected:
        c = rejected[0]
        q = c.get("quality") or {}
        drop = (
            f": {q['metric']} drop {q['drop']:.4g} > max {q['max_drop']:g}"
            if "drop" in q
            else f": {c['reason']}"
        )
        return False, f"{c['id']} was rejected by the quality gate{drop}"
    c = cands[0]
    return None, f"could not be measured: {c['id']} is {c['status']}: {c['reason']}"


def confirmations(report: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The result document's `advice` section: the advice and, per piece, whether
    the run confirmed it (true / false / null with why)."""
    items = list(report["advice"])
    ids = {a["id"] for a in items}
    # The ~1 ms rule needs a baseline; after a run there is one.
    v1 = next((v for v in doc.get("verdicts", []) if v["batch_size"] == 1), None)
    base = _batch1_p50(doc, v1 and v1["baseline"])
    if "small-model" not in ids and base is not None and base <= SMALL_BASELINE_MS:
        a = small_model_advice(base)
        items.append(
            {
                "id": a.id,
                "text": a.text,
                "reason": a.reason,
                "proposes": [],
                "excludes": [],
                "confirm": a.confirm,
                "warning": a.warning,
            }
        )
    checked = []
    for item in items:
        confirmed, why = _confirm_one(item, doc, report.get("excluded") or [])
        checked.append({**item, "confirmed": confirmed, "why": why})
    return {**report, "advice": checked}
