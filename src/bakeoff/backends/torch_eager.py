"""PyTorch eager on the CPU: FP32, and INT8 by dynamic quantization of Linear layers."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from bakeoff.backends import (
    Availability,
    BuildContext,
    LoadContext,
    Offer,
    Variant,
    package_availability,
)
from bakeoff.backends.common import check_options

RUNTIME = "torch"
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
    if precision == "int8" and int8:
        return [Offer(Variant(runtime, "int8", "dynamic"))]
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
    return model, settings


def load(variant: Variant, artifact: dict[str, Any], ctx: LoadContext) -> TorchRunner:
    check_options(ctx.options, OPTIONS, RUNTIME)
    model, settings = load_model(variant, ctx)
    return TorchRunner(model, settings)
