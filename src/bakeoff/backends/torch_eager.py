"""PyTorch eager on the CPU: FP32; BF16 and FP16 by autocast over the FP32 model; INT8
by dynamic quantization of Linear layers; INT4 weight-only Linear layers on torch's own
CPU int4 kernel."""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

from bakeoff.backends import Availability, BuildContext, LoadContext, Offer, Variant
from bakeoff.backends.common import check_options, package_availability
from bakeoff.hardware import emulation_note

RUNTIME = "torch"
# Eager runs whatever shape it is given.
ANY_BATCH_SIZE = True
INSTALL = "pip install torch==2.13.0"


def availability() -> Availability:
    return package_availability("torch", "torch", INSTALL)


def offers(precision: str, model_kind: str) -> list[Offer]:
    return torch_offers(RUNTIME, precision, model_kind, int8=True)


def torch_offers(runtime: str, precision: str, model_kind: str, int8: bool) -> list[Offer]:
    if model_kind not in ("torch", "hf"):
        return [Offer(Variant(runtime, precision), f"the model is {model_kind}, not PyTorch")]
    if precision == "fp32":
        return [Offer(Variant(runtime, "fp32"))]
    if precision in AUTOCAST_DTYPES:
        # Autocast runs on any CPU; without native arithmetic it emulates the
        # precision, which the note says and the measurement prices.
        return [Offer(Variant(runtime, precision, "autocast"), note=emulation_note(precision))]
    if precision == "int4":
        # The int4 kernel takes bf16 activations (see int4_weight_only).
        bf16 = emulation_note("bf16")
        note = f"INT4 weight-only computes in bf16, and {bf16}" if bf16 else None
        return [Offer(Variant(runtime, "int4", "weight-only"), note=note)]
    if precision == "int8" and int8:
        return [Offer(Variant(runtime, "int8", "dynamic"), note=emulation_note("int8"))]
    if precision == "int8":
        return [
            Offer(
                Variant(runtime, "int8"),
                "no INT8 path for torch.compile on this CPU build; see torch-int8-dynamic",
            )
        ]
    return [Offer(Variant(runtime, precision), f"{precision} is not built by this version")]


def build(variant: Variant, ctx: BuildContext) -> dict[str, Any]:
    return {}  # the model is rebuilt from its source inside the worker


AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
INT4_GROUP_SIZE = 32  # 128 lost ~1.6x more cosine per MiniLM-sized Linear layer


class TorchRunner:
    def __init__(self, model: Any, settings: dict[str, Any]) -> None:
        self.model = model
        self.settings = settings

    def prepare(self, batch: dict[str, Any]) -> Any:
        import torch

        return tuple(torch.from_numpy(v) for v in batch.values())

    def run(self, prepared: Any) -> Any:
        return self.model(*prepared)

    def to_numpy(self, output: Any) -> Any:
        from bakeoff.models import first_output

        return first_output(output).detach().float().numpy()

    def named_outputs(self, output: Any) -> list[tuple[str, Any]]:
        return [(n, t.detach().float().numpy()) for n, t in torch_tensors(output)]


def set_torch_threads(threads: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set once in this process
        torch.set_num_interop_threads(1)
    # Gradients are never needed for inference; turning them off for the process
    # avoids a context manager on every timed call.
    torch.set_grad_enabled(False)
    return {
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "torch_version": torch.__version__,
    }


OPTIONS = {"threads"}


def load_model(variant: Variant, ctx: LoadContext) -> tuple[Any, dict[str, Any]]:
    import torch

    from bakeoff.models import build_torch_model

    settings = set_torch_threads(ctx.threads)
    model = build_torch_model(ctx.source)
    if variant.precision == "int8":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao deprecation notices
            # Per-channel weights: per-tensor loses twice as much quality on MiniLM.
            qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
            model = torch.ao.quantization.quantize_dynamic(
                model, {torch.nn.Linear: qconfig}, dtype=torch.qint8
            )
        settings["quantization"] = {
            "method": "dynamic",
            "modules": ["Linear"],
            "dtype": "qint8",
            "weights": "per-channel",
        }
        settings["quantized_engine"] = torch.backends.quantized.engine
    if variant.precision == "int4":
        model, settings["quantization"] = int4_weight_only(model, INT4_GROUP_SIZE)
    if variant.precision in AUTOCAST_DTYPES:
        settings["quantization"] = autocast_settings(AUTOCAST_DTYPES[variant.precision])
    return model, settings


def with_autocast(model: Any, precision: str) -> Any:
    """Call `model` under CPU autocast for a BF16/FP16 variant; others unchanged.

    The weights stay FP32 and autocast casts them per call (matmul-like ops run
    in the low precision, numerically sensitive ones stay FP32), which is how
    PyTorch runs mixed precision on a CPU without rewriting the model.
    """
    if precision not in AUTOCAST_DTYPES:
        return model
    import torch

    dtype = getattr(torch, AUTOCAST_DTYPES[precision])

    def call(*args: Any) -> Any:
        with torch.autocast("cpu", dtype=dtype):
            return model(*args)

    call.__wrapped__ = model  # type: ignore[attr-defined]  # sizes.model_bytes finds the weights
    return call


def autocast_settings(dtype_name: str) -> dict[str, Any]:
    import torch

    # oneDNN's own check that the CPU has native kernels for the low precision
    native = {
        "bfloat16": torch.ops.mkldnn._is_mkldnn_bf16_supported,
        "float16": torch.ops.mkldnn._is_mkldnn_fp16_supported,
    }[dtype_name]
    return {
        "method": "autocast",
        "dtype": dtype_name,
        "device_type": "cpu",
        "weights": "float32 (cast per call)",
        "onednn_native": bool(native()),
        "output": "float32 for the quality gate",
    }


def int4_weight_only(model: Any, group_size: int) -> tuple[Any, dict[str, Any]]:
    """Replace Linear layers by 4-bit group-quantized ones on aten's CPU int4 matmul.

    Needs no extra package: torch ships `_weight_int4pack_mm_for_cpu` (the
    kernel torchao's Int4CPULayout uses). It is fast only with bf16 activations
    (with float32 ones it ran ~80x slower on a 384x1536 layer), so activations go
    in as bf16, as torchao does. Measured on one thread, it beats the dense FP32
    matmul at 1-8 rows but is ~2x slower at 128 rows (MiniLM's tokens per
    sentence): the race decides. Its packing wants out_features a multiple of 16
    and in_features a multiple of the group size; other Linear layers stay FP32
    and are listed in the settings.
    """
    import torch

    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        raise RuntimeError(
            f"torch {torch.__version__} has no aten._weight_int4pack_mm_for_cpu kernel for "
            "INT4 weight-only; install torchao (pip install torchao) or a newer torch"
        )
    int4_linear = _int4_linear_class()
    kept: dict[str, str] = {}
    quantized = 0
    for name, module in list(model.named_modules()):
        if type(module) is not torch.nn.Linear:
            continue
        n_out, n_in = module.weight.shape
        if n_out % 16 or n_in % group_size:
            kept[name] = (
                f"in_features {n_in} not a multiple of {group_size}"
                if n_in % group_size
                else f"out_features {n_out} not a multiple of 16"
            )
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, int4_linear(module, group_size))
        quantized += 1
    if not quantized:
        raise RuntimeError(
            "INT4 weight-only quantized no Linear layer: "
            + ("; ".join(f"{k}: {v}" for k, v in kept.items()) or "the model has none")
        )
    return model, {
        "method": "weight-only",
        "bits": 4,
        "group_size": group_size,
        "symmetric": False,  # the kernel's format: per-group scale and float zero point
        "algorithm": "round-to-nearest, min/max per group",
        "kernel": "aten._weight_int4pack_mm_for_cpu",
        "activations": "bfloat16 (cast per layer; output float32)",
        "quantized_linear": quantized,
        "float32_linear": kept,
    }


@functools.cache
def _int4_linear_class() -> Any:
    """The module class, defined on first use so importing this file needs no torch."""
    import torch

    class Int4WeightOnlyLinear(torch.nn.Module):
        def __init__(self, linear: torch.nn.Linear, group_size: int) -> None:
            super().__init__()
            self.group_size = group_size
            self.out_features, self.in_features = linear.weight.shape
            packed, scales_and_zeros = _quantize_int4(linear.weight.detach(), group_size)
            self.register_buffer("packed", packed)
            # bf16 like the activations: the kernel reads both in one dtype
            self.register_buffer("scales_and_zeros", scales_and_zeros.to(torch.bfloat16))
            self.bias = linear.bias

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            lead = x.shape[:-1]
            flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(
                flat, self.packed, self.group_size, self.scales_and_zeros
            ).to(x.dtype)
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*lead, self.out_features)

    return Int4WeightOnlyLinear


def _quantize_int4(weight: Any, group_size: int) -> tuple[Any, Any]:
    """Asymmetric 4-bit groups along in_features, in the layout the CPU kernel reads.

    Values q in 0..15 dequantize as (q - 8) * scale + zero; scales and zeros are
    stored as [in_features / group, out_features, 2].
    """
    import torch

    n_out, n_in = weight.shape
    groups = weight.float().reshape(-1, group_size)
    lo = groups.amin(dim=1, keepdim=True)
    hi = groups.amax(dim=1, keepdim=True)
    scales = (hi - lo).clamp(min=1e-6) / 15
    zeros = lo + scales * 8
    q = groups.sub(lo).div(scales).round().clamp(0, 15).to(torch.int32).reshape(n_out, n_in)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)  # 8: inner k tiles
    scales_and_zeros = (
        torch.cat([scales.reshape(n_out, -1, 1), zeros.reshape(n_out, -1, 1)], dim=2)
        .transpose(0, 1)
        .contiguous()
    )
    return packed, scales_and_zeros


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> TorchRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    model, settings = load_model(variant, ctx)
    return TorchRunner(with_autocast(model, variant.precision), settings)


def torch_tensors(output: Any) -> list[tuple[str, Any]]:
    """A torch model's outputs that are tensors, named (bakeoff.tensors.named_outputs)."""
    from bakeoff.tensors import named_outputs

    return [(n, t) for n, t in named_outputs(output) if hasattr(t, "detach")]
