"""The rules that read this machine: the CPU's INT8 and BF16 instructions (what to
expect of each precision here; the measurement decides), a baseline so fast that an
optimization stack may not pay, and whether training fits this machine's memory.
"""

from __future__ import annotations

from bakeoff import hardware
from bakeoff.advise.rules import NOT_MEASURED, X86_TARGETS, Advice, Context

# A baseline at or below this many ms per call (batch 1) leaves little to win.
SMALL_BASELINE_MS = 1.5
# Training memory per parameter with Adam in FP32: weights 4 + gradients 4 +
# two moments 8 bytes (ZeRO paper, Rajbhandari et al. 2020, section 3.1).
TRAIN_BYTES_PER_PARAM = 16
_INT8_FLAGS = hardware.NATIVE["int8"]
_BF16_FLAGS = hardware.NATIVE["bf16"]


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
            ("openvino", ("torch", "hf", "onnx", "openvino", "keras", "savedmodel")),
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
    # Proposed for every goal: the default run measures batch 32 as well as 1, and on
    # MiniLM with AMX OpenVINO BF16 led at batch 32 (134 samples/s against INT8's 113)
    # while INT8 led at batch 1; left out, the default pick was 15% behind the best.
    return [
        Advice(
            "cpu-bf16",
            "BF16 (torch autocast, eager and compiled; OpenVINO's bf16 hint)",
            f"this CPU has {', '.join(present)}: native BF16 matmuls, which pay most at "
            "larger batches; measured at every batch size",
            proposes=[("torch", "bf16"), ("openvino", "bf16")],
            confirm="wins",
        )
    ]


def rule_small_model(ctx: Context) -> list[Advice]:
    """A baseline that already takes about a millisecond: an optimization stack
    (export, quantization, a second runtime in production) may not pay for itself."""
    if ctx.baseline_ms is None or ctx.baseline_ms > SMALL_BASELINE_MS:
        return []
    return [small_model_advice(ctx.baseline_ms)]


def format_ms(x: float) -> str:
    """Three significant figures: a tiny model's 0.004 ms is not "0.00 ms"."""
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def small_model_advice(baseline_ms: float) -> Advice:
    return Advice(
        "small-model",
        f"the baseline already takes {format_ms(baseline_ms)} ms per call: an optimization "
        "stack may not pay for its complexity",
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
